/** A background job run in rounds. */
import type { Logger } from 'pino';

/**
 * Runs `round` every `everyMs`, one round at a time (a round still running when the next is due
 * makes that one skip). A failing round is logged once, as `what` not done, until one succeeds again
 * (JetStream not answering through a restart or an election would otherwise log every round).
 * Returns the function that stops it.
 */
export function everyRound(
  everyMs: number,
  round: () => Promise<void>,
  o: { log?: Logger | undefined; what: string; fields?: Record<string, unknown> },
): () => void {
  let running = false;
  let failing = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    round()
      .then(
        () => {
          if (failing) o.log?.info(o.fields ?? {}, `${o.what}: done again`);
          failing = false;
        },
        (err: unknown) => {
          if (!failing) o.log?.warn({ ...o.fields, err }, `${o.what}: not done; trying again next round`);
          failing = true;
        },
      )
      .finally(() => {
        running = false;
      });
  }, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}
