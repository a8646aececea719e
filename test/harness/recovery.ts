/**
 * How long deliveries took to recover after a crash: for each delivery, the time from whichever came
 * later — the message being accepted, or the last kill/restart — to its handler. `pnpm
 * test:contended` collects the worst of each crash test (PARLEY_RECOVERY_REPORT) and checks it
 * against its bound; the tests themselves only report it (speed is never a pass/fail test here).
 */
import { appendFile } from 'node:fs/promises';

/** One delivery: when its message was accepted and when a member's handler got it (ms since the epoch). */
export interface TimedDelivery {
  acceptedAt: number;
  handledAt: number;
}

/** The worst delay of `deliveries` after `lastRestartAt`, in ms (0 when none). */
export function worstDelayAfterRecovery(deliveries: Iterable<TimedDelivery>, lastRestartAt: number): number {
  let worst = 0;
  for (const d of deliveries) worst = Math.max(worst, d.handledAt - Math.max(d.acceptedAt, lastRestartAt));
  return worst;
}

/** Logs the figure and appends it as a JSON line to `$PARLEY_RECOVERY_REPORT` when set. */
export async function reportRecovery(
  test: string,
  worstMs: number,
  extra: Record<string, unknown> = {},
): Promise<void> {
  console.log(
    `recovery: ${test}: worst delivery ${worstMs} ms after the last kill/restart${Object.keys(extra).length ? ` ${JSON.stringify(extra)}` : ''}`,
  );
  const file = process.env.PARLEY_RECOVERY_REPORT;
  if (!file) return;
  const nodes = Number(process.env.PARLEY_TEST_NODES ?? 1);
  await appendFile(
    file,
    `${JSON.stringify({ test, nodes, worstMs, at: new Date().toISOString(), ...extra })}\n`,
  );
}
