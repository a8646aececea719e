/**
 * The inbox consumers' acknowledgement floors, kept where a nats-server crash does not empty them.
 *
 * nats-server before 2.11.11 (and 2.12.0) rewrites a consumer's state file in place, and a kill -9
 * between the truncate and the write brings the consumer back at its start, pushing the whole inbox
 * again. A running agent notices (its SDK remembers the floor the server told it); an agent started
 * after the crash knows nothing. So the replica holding fan-out partition `k` reads the consumers of
 * inbox shard `k` every `everyMs` (one consumer list per shard) and records each one's floor in
 * `parley_floors`, key `inbox.<k>`: participant → floor. A KV value is a stream entry,
 * appended to a message block, not a file rewritten in place. When an agent attaches, a consumer
 * whose floor is below the recorded one lost its state, and is made again after it (see
 * `attachInbox`).
 *
 * The record is not tied to one consumer: nats-server 2.9 reports a consumer's creation time from
 * its metadata file, which it rewrites with the time of its last start at the next update (any
 * attach), so that time changes across restarts and cannot tell a consumer made again from one that
 * lost its state. Nor does it need to be: everything up to a floor was acknowledged by that
 * participant, whatever consumer delivers its inbox now.
 */
import type { ConsumerInfo, JetStreamManager } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { INBOX_SHARDS, inboxShardOf, inboxShardStream, isParticipantId } from '@parley/contracts';
import { everyRound, type KvWatch, type Logger, updateKv, watchKv } from '@parley/kit';
import * as z from 'zod';

/** One shard's record: participant → the acknowledgement floor of its inbox consumer. */
export const ShardFloors = z.record(z.string(), z.number().int().nonnegative());
export type ShardFloors = z.infer<typeof ShardFloors>;

/** The key of inbox shard `shard`'s record. */
export const floorsKey = (shard: number): string => `inbox.${shard}`;

/** What of a consumer's info the record keeps. */
export interface ListedConsumer {
  name: string;
  ack_floor: Pick<ConsumerInfo['ack_floor'], 'stream_seq'>;
}

/**
 * The record of a shard from its consumers as listed now and what was recorded: the higher of each
 * consumer's floor as the server reports it and its recorded one. A floor never goes down: below the
 * recorded one, the server lost the consumer's state (and everything up to the recorded floor was
 * acknowledged by that participant, whatever became of the consumer since). `inboxEnd` (the shard
 * stream's last sequence, read only when some floor went down) drops a recorded floor past it: the
 * stream was made again. A consumer that is not listed keeps its floor (a cluster lists only the
 * consumers whose leaders answer, and right after a crash is when the floor matters); a
 * deregistered participant's (`gone`) is dropped. One that acknowledged nothing yet is not recorded.
 */
export function mergeFloors(
  recorded: ShardFloors | undefined,
  listed: Iterable<ListedConsumer>,
  inboxEnd = Number.POSITIVE_INFINITY,
  gone: ReadonlySet<string> = new Set(),
): ShardFloors {
  const out: ShardFloors = {};
  for (const [name, floor] of Object.entries(recorded ?? {}))
    if (floor <= inboxEnd && !gone.has(name)) out[name] = floor;
  for (const c of listed) {
    const floor = Math.max(out[c.name] ?? 0, c.ack_floor.stream_seq);
    if (floor > 0 && !gone.has(c.name)) out[c.name] = floor;
  }
  return out;
}

/** Whether a recorded floor is above what the server reports now (see {@link mergeFloors}). */
const anyLower = (recorded: ShardFloors | undefined, listed: ListedConsumer[]) =>
  listed.some((c) => (recorded?.[c.name] ?? 0) > c.ack_floor.stream_seq);

function sameFloors(a: ShardFloors | undefined, b: ShardFloors): boolean {
  const keys = Object.keys(b);
  return !!a && Object.keys(a).length === keys.length && keys.every((k) => a[k] === b[k]);
}

/** See the module comment. */
export interface InboxFloors {
  /** The floor recorded for `participant`'s inbox consumer, 0 when none is (the watched copy). */
  floorOf(participant: string): number;
  /**
   * The same, read from the bucket: the watched copy can be behind the last round. An agent whose
   * consumer came back at its start asks within milliseconds of the crash, and the round recorded
   * just before it may not have reached this replica's watch (a clean clone's run: the copy had no
   * floor yet, the consumer was left at its start and pushed 202 entries again).
   */
  read(participant: string): Promise<number>;
  /** `participant` was deregistered: its floor goes at its shard's next round. */
  forget(participant: string): void;
  stop(): void;
}

export interface InboxFloorsOptions {
  jsm: JetStreamManager;
  kv: KV;
  /** The inbox shards this replica records: those whose fan-out partition it holds. */
  shards: () => number[];
  /** How often they are recorded, ms (0: never). */
  everyMs: number;
  log: Logger;
}

/** Starts watching the records (a copy in memory for `floorOf`) and recording the held shards. */
export async function startInboxFloors(o: InboxFloorsOptions): Promise<InboxFloors> {
  const log = o.log.child({ component: 'inbox-floors' });
  const records = new Map<number, ShardFloors>();
  const watch: KvWatch = await watchKv(o.kv, {
    key: 'inbox.*',
    log,
    onEntry: (e) => {
      const shard = Number(e.key.slice('inbox.'.length));
      if (e.operation !== 'PUT' || e.length === 0) records.delete(shard);
      else records.set(shard, ShardFloors.parse(e.json()));
    },
    onError: (err, e) => log.warn({ err, key: e.key }, 'unreadable inbox floor record ignored'),
  });
  await watch.initialized;
  const gone = new Set<string>();

  async function recordShard(shard: number): Promise<void> {
    const stream = inboxShardStream(shard);
    const listed: ListedConsumer[] = [];
    for await (const c of o.jsm.consumers.list(stream)) if (isParticipantId(c.name)) listed.push(c);
    const end = anyLower(records.get(shard), listed)
      ? (await o.jsm.streams.info(stream)).state.last_seq
      : undefined;
    // Most rounds change nothing (idle agents): no read of the record, no write.
    if (!sameFloors(records.get(shard), mergeFloors(records.get(shard), listed, end, gone))) {
      await updateKv<ShardFloors>(
        o.kv,
        floorsKey(shard),
        (current) => {
          const next = mergeFloors(current, listed, end, gone);
          return sameFloors(current, next) ? undefined : next;
        },
        { schema: ShardFloors, attempts: 3, what: `the inbox floors of shard ${shard}` },
      );
    }
    for (const p of gone) if (inboxShardOf(p) === shard) gone.delete(p);
  }

  /** One round: the held shards in turn; the first failure ends it (one request a round to a
   * cluster coming back, not one per shard). */
  async function record(): Promise<void> {
    const held = o.shards();
    // Another replica's shards are that replica's to forget in.
    for (const p of gone) if (!held.includes(inboxShardOf(p))) gone.delete(p);
    for (const shard of held) await recordShard(shard);
  }
  const watched = (participant: string) => records.get(inboxShardOf(participant))?.[participant] ?? 0;
  const stop =
    o.everyMs > 0 ? everyRound(o.everyMs, record, { log, what: 'recording the inbox floors' }) : undefined;

  return {
    floorOf: watched,
    async read(participant) {
      const e = await o.kv.get(floorsKey(inboxShardOf(participant)));
      const stored = e?.operation === 'PUT' && e.length > 0 ? ShardFloors.parse(e.json()) : {};
      return Math.max(stored[participant] ?? 0, watched(participant));
    },
    forget(participant) {
      gone.add(participant);
    },
    stop() {
      stop?.();
      watch.stop();
    },
  };
}

/** The inbox shards recorded by the holder of each of `partitions` (shard k by partition k mod n). */
export function shardsOf(owned: readonly number[], partitions: number): number[] {
  const held = new Set(owned);
  return Array.from({ length: INBOX_SHARDS }, (_, k) => k).filter((k) => held.has(k % partitions));
}
