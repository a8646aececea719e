/**
 * The chaos test's stream reader: reads what a check needs from a stream while faults come and go,
 * and says when it may have missed entries.
 */
import { DeliverPolicy, type JetStreamClient, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';

/** Options of {@link follow}. */
export interface FollowOptions {
  /** Stream sequence to read from. @default 1 */
  from?: number;
  /**
   * Checks after every fetch whether the stream dropped entries the reader had not read yet, and
   * calls `onGap` (before the fetched entries are handed on) when it did. For streams whose entries
   * expire (a KV bucket with a TTL is a stream with `max_age`): a reader away longer than that — its
   * consumer on a killed node, JetStream without leaders for 10 s after a kill -9 — never sees the
   * entries that aged out meanwhile.
   */
  gaps?: { jsm: JetStreamManager; onGap: (from: number, firstSeq: number) => void };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Reads `filter` of `stream` while `running()`, in fetches from the last position seen and with a
 * fresh consumer after any failure: a consumer on a node that is killed or paused may stop without
 * telling, and a check must not stop with it. (nats-server 2.9 takes one filter subject per
 * consumer.)
 *
 * The gap check is exact in one direction: an entry at or after the fetch's start position that was
 * removed before it was read leaves the stream's first sequence above that position, so it is never
 * missed silently. It may also fire when entries were read just before they expired (a reader a TTL
 * behind), which costs the check a little coverage, never a false alarm.
 * Resolves once `running()` turned false and the fetch in progress was handed on.
 */
export function follow(
  js: JetStreamClient,
  stream: string,
  filter: string,
  running: () => boolean,
  onMessage: (m: JsMsg) => void | Promise<void>,
  options: FollowOptions = {},
): Promise<void> {
  return (async () => {
    let from = options.from ?? 1;
    // A reader stuck at one position (no leader for a while) reports its gap once.
    let gapAt = 0;
    while (running()) {
      try {
        const reader = await js.consumers.get(stream, {
          filter_subjects: filter,
          deliver_policy: DeliverPolicy.StartSequence,
          opt_start_seq: from,
        });
        while (running()) {
          const at = from;
          const got: JsMsg[] = [];
          for await (const m of await reader.fetch({ max_messages: 256, expires: 1_000 })) got.push(m);
          if (options.gaps) {
            // After the fetch: whatever expired before it was delivered has moved the first sequence.
            const first = (await options.gaps.jsm.streams.info(stream)).state.first_seq;
            if (first > at && at !== gapAt) {
              gapAt = at;
              options.gaps.onGap(at, first);
            }
          }
          for (const m of got) {
            from = m.seq + 1;
            await onMessage(m);
          }
        }
      } catch {
        await sleep(250);
      }
    }
  })();
}
