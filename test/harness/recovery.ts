/**
 * How long deliveries took to recover after a crash: for each delivery, the time from whichever came
 * later — the message being accepted, or the last kill/restart — to its handler. `pnpm
 * test:contended` collects the worst of each crash test (PARLEY_RECOVERY_REPORT) and checks it
 * against its bound; the tests themselves only report it (speed is never a pass/fail test here).
 */
import { appendFile } from 'node:fs/promises';
import { type JetStreamManager, jetstreamManager } from '@nats-io/jetstream';
import { connect, credsAuthenticator } from '@nats-io/transport-node';
import { buckets, inboxStreams, streams } from '@parley/contracts';

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

/** What a recovery probe asks: whether one stream or consumer answers with a leader. */
type Probe = (jsm: JetStreamManager) => Promise<boolean>;

/** Whether `info` (of a stream or a consumer) came back, from a leader when it is replicated. */
const led = (info: { cluster?: { leader?: string } } | undefined) =>
  info !== undefined && (!info.cluster || info.cluster.leader !== undefined);

/** When every probe answers at once after a restart (ms since the epoch), or undefined after `timeoutMs`. */
async function whenAnswering(
  parley: { natsUrl: string; serviceCreds(name?: string): Promise<string> },
  probes: Probe[],
  timeoutMs: number,
): Promise<number | undefined> {
  const nc = await connect({
    servers: parley.natsUrl.split(','),
    authenticator: credsAuthenticator(new TextEncoder().encode(await parley.serviceCreds())),
    maxReconnectAttempts: -1,
    reconnectTimeWait: 100,
  });
  try {
    const jsm = await jetstreamManager(nc, { checkAPI: false, timeout: 1_000 });
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if ((await Promise.all(probes.map((p) => p(jsm).catch(() => false)))).every(Boolean)) return Date.now();
      await new Promise((r) => setTimeout(r, 50));
    }
    return undefined;
  } finally {
    await nc.close();
  }
}

/**
 * When the room log and the inbox streams answer again after a restart (each has a leader that
 * answers its info), in ms since the epoch, or undefined if they did not within `timeoutMs`. How
 * much of a recovery figure is nats-server's own (electing JetStream's leaders), and how much is
 * Parley's: a delivery cannot be faster than the streams it goes through.
 */
export function whenStreamsAnswer(
  parley: { natsUrl: string; serviceCreds(name?: string): Promise<string> },
  timeoutMs = 120_000,
): Promise<number | undefined> {
  return whenAnswering(
    parley,
    [streams.rooms, ...inboxStreams()].map((name) => async (jsm) => led(await jsm.streams.info(name))),
    timeoutMs,
  );
}

/**
 * When the fan-out's lease bucket answers again after a restart (its stream has a leader): leases
 * lapse while the backbone is down, and no partition is fanned out before its lease is taken again.
 */
export function whenLeasesAnswer(
  parley: { natsUrl: string; serviceCreds(name?: string): Promise<string> },
  timeoutMs = 120_000,
): Promise<number | undefined> {
  return whenAnswering(
    parley,
    [async (jsm) => led(await jsm.streams.info(`KV_${buckets.leases}`))],
    timeoutMs,
  );
}
