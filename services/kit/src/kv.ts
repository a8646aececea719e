/** Helpers for KV buckets: watches that say when they have caught up, snapshots, read-modify-write. */
import type { KV, KvEntry } from '@nats-io/kv';
import { ParleyError } from '@parley/contracts';
import type { Logger } from 'pino';
import type { ZodType } from 'zod';
import { retryJetStream } from './jetstream-ready.js';
import { isKvConflict } from './nats-errors.js';

/** How often a watch still replaying the bucket says so, ms. */
const SLOW_REPLAY_MS = 10_000;

/** A running watch of {@link watchKv}. */
export interface KvWatch {
  /** Resolves once every value that existed when the watch started has been handed to `onEntry`. */
  readonly initialized: Promise<void>;
  /** Stops the watch. */
  stop(): void;
}

/** Options of {@link watchKv}. */
export interface WatchKvOptions {
  /** Key or wildcard. @default ">" */
  key?: string;
  /** Called for every current value, then for every change (deletes included), in order. */
  onEntry: (entry: KvEntry) => void;
  /** Called when `onEntry` throws (the watch goes on). */
  onError?: (err: unknown, entry: KvEntry) => void;
  /** Where a wait for a briefly unavailable JetStream is logged. */
  log?: Logger | undefined;
  /** How long to wait for JetStream to answer the watch's creation. @default 60000 */
  deadlineMs?: number;
}

/**
 * Watches a bucket: first the last value of every key (which is how an in-memory view is built
 * without scanning key by key), then every change.
 */
export async function watchKv(kv: KV, options: WatchKvOptions): Promise<KvWatch> {
  const key = options.key ?? '>';
  // Usually at a service's start: a cluster that just came up may not answer for a few seconds.
  const iter = await retryJetStream(`watching ${key} of a KV bucket`, () => kv.watch({ key }), {
    log: options.log,
    ...(options.deadlineMs ? { deadlineMs: options.deadlineMs } : {}),
  });
  // The watcher's consumer knows how many values it will replay first; the client keeps that
  // info (pinned @nats-io/kv 3.4.0) but does not expose it.
  const consumer = (
    iter as unknown as { _data?: { info(cached: boolean): Promise<{ num_pending: number }> } }
  )._data;
  const pending = consumer
    ? (await retryJetStream('the KV watch consumer info', () => consumer.info(true), { log: options.log }))
        .num_pending
    : // Without that info: an empty bucket has nothing to replay; otherwise the last replayed
      // entry (delta 0) marks the end.
      (await kv.status()).values === 0
      ? 0
      : undefined;
  let markInitialized: () => void = () => undefined;
  const initialized = new Promise<void>((resolve) => {
    markInitialized = resolve;
  });
  let received = 0;
  // A service waits for its watches at start and has no health endpoint before: a replay that does
  // not finish says so, instead of a start that hangs without a word.
  const slow =
    pending === 0
      ? undefined
      : setInterval(
          () =>
            options.log?.warn(
              { key, pending, received },
              'KV watch has not replayed the bucket yet: the start waits for it',
            ),
          SLOW_REPLAY_MS,
        );
  slow?.unref();
  void initialized.then(() => clearInterval(slow));
  if (pending === 0) markInitialized();
  void (async () => {
    for await (const e of iter) {
      received++;
      try {
        options.onEntry(e);
      } catch (err) {
        options.onError?.(err, e);
      }
      if (e.isUpdate || e.delta === 0) markInitialized();
    }
    markInitialized();
  })();
  return { initialized, stop: () => iter.stop() };
}

/** Every current entry under `key` (one watch, not one request per key). */
export async function snapshotKv(kv: KV, key = '>'): Promise<Map<string, KvEntry>> {
  const out = new Map<string, KvEntry>();
  const w = await watchKv(kv, {
    key,
    onEntry: (e) => {
      if (e.operation === 'PUT') out.set(e.key, e);
      else out.delete(e.key);
    },
  });
  await w.initialized;
  w.stop();
  return out;
}

/** Options of {@link updateKv}. */
export interface UpdateKvOptions<T> {
  /**
   * The record's schema: the stored value is parsed with it before `change` sees it (a stored
   * value that fails it is an internal error naming the key), and so is what `change` returns.
   */
  schema?: ZodType<T> | undefined;
  /** Reads and writes before giving up. @default 25 */
  attempts?: number | undefined;
  /** The `retryAfterMs` of the UNAVAILABLE error when it gives up. @default 100 */
  retryAfterMs?: number | undefined;
  /** What the record is, for the give-up message. @default the key */
  what?: string | undefined;
}

/** What {@link updateKv} did. */
export interface KvUpdate<T> {
  /** The value `change` last saw (undefined: the key was absent or deleted). */
  previous: T | undefined;
  /** The value now: what was written, or `previous` when `change` left it. */
  value: T | undefined;
  /** The revision of `value` (undefined: absent). */
  revision: number | undefined;
  /** Whether this call wrote. */
  written: boolean;
}

/**
 * Read-modify-write of one JSON record with compare-and-set: reads `key` (validating it with
 * `schema`), gives it to `change`, and writes what `change` returns only if nobody wrote the key
 * in between; when somebody did, it reads again and runs `change` on the newer value. `change`
 * returns `undefined` to leave the record as it is, and may throw (a ParleyError, say) to refuse,
 * which writes nothing. It gets its own copy of the value and may mutate it. After
 * `attempts` conflicts it gives up with `UNAVAILABLE` and a `retryAfterMs`, which the SDK's retry
 * honours.
 */
export async function updateKv<T>(
  kv: KV,
  key: string,
  change: (current: T | undefined) => T | undefined | Promise<T | undefined>,
  options: UpdateKvOptions<T> = {},
): Promise<KvUpdate<T>> {
  const { schema, attempts = 25, retryAfterMs = 100 } = options;
  const decode = (text: string): T => {
    const raw: unknown = JSON.parse(text);
    if (!schema) return raw as T;
    const r = schema.safeParse(raw);
    if (!r.success) throw new Error(`${key} holds an invalid record: ${r.error.message}`, { cause: r.error });
    return r.data;
  };
  for (let i = 0; i < attempts; i++) {
    const e = await kv.get(key);
    const text = e?.operation === 'PUT' && e.length > 0 ? e.string() : undefined;
    const previous = text === undefined ? undefined : decode(text);
    const proposed = await change(text === undefined ? undefined : decode(text));
    if (proposed === undefined) {
      return {
        previous,
        value: previous,
        revision: text === undefined ? undefined : e?.revision,
        written: false,
      };
    }
    const next = schema ? schema.parse(proposed) : proposed;
    const data = JSON.stringify(next);
    try {
      // A deleted key is created again (kv.create allows that); a live one needs its revision.
      const revision =
        text !== undefined && e ? await kv.update(key, data, e.revision) : await kv.create(key, data);
      return { previous, value: next, revision, written: true };
    } catch (err) {
      if (!isKvConflict(err)) throw err;
    }
  }
  throw new ParleyError('UNAVAILABLE', `too much contention on ${options.what ?? key}; retry`, {
    retryAfterMs,
  });
}
