/**
 * The Salesforce bridge: subscribes to Platform Event and Change Data Capture topics over the
 * Pub/Sub API (gRPC bidi `Subscribe`, pull-based: `num_requested` says how many more events it
 * takes, asked again once half were stored), decodes the Avro payloads with the schema from
 * `GetSchema`, turns CDC bitmaps into field names, stores each event through the kit, and keeps
 * the replay id of the last stored event per topic as its cursor. A restart resumes with
 * `replay_preset: CUSTOM` from that id (the event at the id itself is not sent again).
 *
 * Managed subscriptions (`ManagedSubscribe`, open beta at Salesforce): the org holds a
 * ManagedEventSubscription record per subscription (its topic, where it starts), and the server
 * keeps its position. The bridge commits the replay id of each batch once the batch is stored
 * (`CommitReplayRequest`) and waits for the `CommitReplayResponse` before it takes the next one, so
 * a bridge restarted — even one that lost its state directory — resumes after the last committed
 * event. Events stored but not yet committed when it stopped come again; the journal (and the
 * ingress dedupe) keeps them from being stored twice. A refused commit (error code COMMIT) ends
 * the stream; the next one starts after the last commit that succeeded.
 *
 * Outbound, the `publish` action publishes a Platform Event (`Publish`, the payload Avro-encoded in
 * the topic's schema) as a tool call on the asker's behalf.
 *
 * Event types for the mapping: the topic for platform events (`/event/Credit_Hold__e`) and
 * `<topic>:<changeType>` for change events (`/data/AccountChangeEvent:UPDATE`), so a rule can take
 * every change (`/data/AccountChangeEvent*`) or one kind.
 */
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import type { Bridge, SourceEvent } from '../bridge.js';
import { RetryLater } from '../bridge.js';
import { type AvroType, decodeEvent, parseSchema } from './avro.js';
import type { SalesforceAuth } from './oauth.js';
import {
  type CommitReplayResponse,
  type ConsumerEvent,
  eventbus,
  type ManagedFetchRequest,
  type PubSubClient,
  type ReplayPreset,
} from './proto.js';

/** A managed subscription to follow: its developer name, and the topic it is on (the mapping's type). */
export interface ManagedSubscription {
  /** DeveloperName of the ManagedEventSubscription record. */
  name: string;
  /** Its topic (`/data/AccountChangeEvent`, `/event/Order__e`): event types are named after it. */
  topic: string;
}

/** Options of {@link SalesforceSource}. */
export interface SalesforceSourceOptions {
  bridge: Bridge;
  auth: SalesforceAuth;
  /** `host:port` of the Pub/Sub API. @default api.pubsub.salesforce.com:7443 */
  endpoint?: string;
  /** Plaintext gRPC (local test servers only). @default false: TLS */
  insecure?: boolean;
  /** Topics followed with `Subscribe`, the bridge's own replay ids as the cursor. */
  topics: string[];
  /** Managed subscriptions followed with `ManagedSubscribe`, the server keeping the position. */
  managed?: ManagedSubscription[];
  /** How long a commit may wait for its answer before the stream is started again, in ms. @default 30000 */
  commitTimeoutMs?: number;
  /** Where a topic without a cursor starts. @default LATEST */
  startAt?: Exclude<ReplayPreset, 'CUSTOM'>;
  /** Events requested at a time (flow control). @default 100 */
  batch?: number;
  /** Longest backoff after an outage, in ms. @default 30000 */
  maxBackoffMs?: number;
}

type Cursors = Record<string, string>;

/** A running subscription set. */
export class SalesforceSource {
  readonly #o: SalesforceSourceOptions;
  readonly #client: PubSubClient;
  readonly #schemas = new Map<string, Promise<AvroType>>();
  readonly #topicSchemas = new Map<string, Promise<string>>();
  readonly #abort = new AbortController();
  readonly #calls = new Set<grpc.ClientDuplexStream<unknown, unknown>>();
  #loops: Promise<void>[] = [];
  /** The replay id (base64) of the last event stored, per topic. */
  #latest: Cursors = {};

  constructor(o: SalesforceSourceOptions) {
    this.#o = o;
    const { PubSub } = eventbus();
    this.#client = new PubSub(
      o.endpoint ?? 'api.pubsub.salesforce.com:7443',
      o.insecure ? grpc.credentials.createInsecure() : grpc.credentials.createSsl(),
    ) as unknown as PubSubClient;
  }

  /** Starts one subscription per topic, each retrying on its own. */
  start(): void {
    const c = this.#o.bridge.state.cursor;
    this.#latest = c ? (JSON.parse(c) as Cursors) : {};
    this.#loops = [
      ...this.#o.topics.map((t) => this.#run((got) => this.#subscribeOnce(t, got))),
      ...(this.#o.managed ?? []).map((m) => this.#run((got) => this.#managedOnce(m, got))),
    ];
  }

  /** Cancels the streams and waits for the loops to end. */
  async stop(): Promise<void> {
    this.#abort.abort();
    for (const c of this.#calls) c.cancel();
    await Promise.allSettled(this.#loops);
    this.#client.close();
  }

  async #run(once: (got: { any: boolean }) => Promise<void>): Promise<void> {
    const maxBackoff = this.#o.maxBackoffMs ?? 30_000;
    let failures = 0;
    while (!this.#abort.signal.aborted) {
      const got = { any: false };
      try {
        await once(got);
      } catch (err) {
        if (this.#abort.signal.aborted) return;
        if (got.any) failures = 0;
        failures++;
        const e = err as grpc.ServiceError;
        if (e.code === grpc.status.UNAUTHENTICATED) this.#o.auth.invalidate();
        if (!(err instanceof RetryLater)) {
          await this.#o.bridge.sourceDown(
            e.code !== undefined
              ? `${grpc.status[e.code]} ${e.details ?? ''}`.trim()
              : (e.message ?? String(err)),
          );
        }
        const delay = Math.min(maxBackoff, 100 * 2 ** Math.min(failures, 12));
        await sleep(delay / 2 + Math.random() * (delay / 2), this.#abort.signal);
      }
    }
  }

  async #subscribeOnce(topic: string, got: { any: boolean }): Promise<void> {
    const bridge = this.#o.bridge;
    const batch = this.#o.batch ?? 100;
    const md = await this.#o.auth.metadata();
    const call = this.#client.Subscribe(md);
    const cursor = this.#latest[topic];
    call.write({
      topic_name: topic,
      replay_preset: cursor ? 'CUSTOM' : (this.#o.startAt ?? 'LATEST'),
      ...(cursor ? { replay_id: Buffer.from(cursor, 'base64') } : {}),
      num_requested: batch,
    });
    let pending = batch;
    await this.#consume(call, got, `subscribed to ${topic}`, {
      handle: async (responses, writable) => {
        const events = responses.flatMap((r) => r.events);
        if (events.length === 0) return; // keepalives
        const items: { event?: SourceEvent | undefined; cursor: () => string }[] = [];
        for (const ce of events) {
          const replayId = ce.replay_id.toString('base64');
          // Asked when the batch persists: the topic moves to this id, the other topics stay current.
          const cursor = () => {
            this.#latest[topic] = replayId;
            return JSON.stringify(this.#latest);
          };
          items.push({ event: await this.#toSourceEvent(topic, ce.event), cursor });
        }
        await bridge.ingestBatch(items);
        writable();
        pending -= events.length;
        if (pending <= batch / 2) {
          call.write({ topic_name: topic, num_requested: batch - pending });
          pending = batch;
        }
      },
    });
  }

  /**
   * One ManagedSubscribe stream: after a batch is stored its last replay id is committed and the
   * answer awaited before the next batch (events that arrive meanwhile form that next batch).
   */
  async #managedOnce(m: ManagedSubscription, got: { any: boolean }): Promise<void> {
    const bridge = this.#o.bridge;
    const batch = this.#o.batch ?? 100;
    const md = await this.#o.auth.metadata();
    const call = this.#client.ManagedSubscribe(md);
    const waiting = new Map<string, (r: CommitReplayResponse) => void>();
    let pending = batch;
    let committed: Buffer | undefined;
    const commit = async (replayId: Buffer, covered: string[], writable: () => void): Promise<void> => {
      writable();
      const id = randomUUID();
      const started = performance.now();
      const timeoutMs = this.#o.commitTimeoutMs ?? 30_000;
      let timer: NodeJS.Timeout | undefined;
      const answer = new Promise<CommitReplayResponse>((resolve, reject) => {
        waiting.set(id, resolve);
        timer = setTimeout(
          () => reject(new Error(`commit ${id} not answered within ${timeoutMs} ms`)),
          timeoutMs,
        );
      });
      call.write({
        commit_replay_id_request: { commit_request_id: id, replay_id: replayId },
      } satisfies ManagedFetchRequest);
      try {
        // The stream ending rejects the wait too (consume's `ended`).
        const res = await Promise.race([answer, ended]);
        if (res.error) throw new Error(`commit refused: ${res.error.code} ${res.error.msg}`.trim());
      } finally {
        clearTimeout(timer);
        waiting.delete(id);
      }
      bridge.metrics.observeCommit((performance.now() - started) / 1000);
      committed = replayId;
      // The server holds the position now: what this batch stored leaves the journal.
      this.#latest[`managed:${m.name}`] = replayId.toString('base64');
      await bridge.state.advance(JSON.stringify(this.#latest), 0, covered);
    };
    let ended: Promise<never> = new Promise(() => undefined);
    call.write({ developer_name: m.name, num_requested: batch } satisfies ManagedFetchRequest);
    await this.#consume(call, got, `subscribed to ${m.name} (${m.topic}, managed)`, {
      started: (e) => {
        ended = e;
      },
      route: (res) => {
        const answer = res.commit_response;
        // One answer may stand for several commits (the last of them): with one commit in flight
        // at a time it is that one's.
        if (answer) waiting.get(answer.commit_request_id)?.(answer);
        return res.events.length > 0 || !answer;
      },
      handle: async (responses, writable) => {
        const events = responses.flatMap((r) => r.events);
        if (events.length === 0) {
          // An empty batch's latest replay id is committed too (as Salesforce asks), once.
          const latest = responses[responses.length - 1]?.latest_replay_id;
          if (latest && latest.length > 0 && !committed?.equals(latest)) await commit(latest, [], writable);
          return;
        }
        const items: { event?: SourceEvent | undefined }[] = [];
        for (const ce of events) items.push({ event: await this.#toSourceEvent(m.topic, ce.event) });
        await bridge.ingestBatch(items);
        writable();
        pending -= events.length;
        if (pending <= batch / 2) {
          call.write({ num_requested: batch - pending } satisfies ManagedFetchRequest);
          pending = batch;
        }
        const last = (events[events.length - 1] as ConsumerEvent).replay_id;
        await commit(
          last,
          events.map((ce) => ce.event.id),
          writable,
        );
      },
    });
  }

  /**
   * Reads a subscribe stream until it ends or its handling fails. Responses are handed on in
   * batches, in order: whatever arrived while the previous batch was being stored is the next one,
   * so a source sending faster than events are stored costs one cursor write (or commit) per batch,
   * not per event. `route` sees each response first and says whether it is for `handle`. When the
   * stream ends, the batch being stored finishes (it may not write to the call any more: `writable`
   * throws) before this returns.
   */
  async #consume<Q, R extends { events: ConsumerEvent[] }>(
    call: grpc.ClientDuplexStream<Q, R>,
    got: { any: boolean },
    activity: string,
    o: {
      handle: (responses: R[], writable: () => void) => Promise<void>;
      route?: (res: R) => boolean;
      started?: (ended: Promise<never>) => void;
    },
  ): Promise<void> {
    this.#calls.add(call as grpc.ClientDuplexStream<unknown, unknown>);
    let closed = false;
    const writable = () => {
      if (closed) throw new Error('the subscription stream ended');
    };
    let fail: (err: unknown) => void = () => undefined;
    const ended = new Promise<never>((_, reject) => {
      fail = reject;
    });
    ended.catch(() => undefined);
    o.started?.(ended);
    let waiting: R[] = [];
    let draining: Promise<void> | undefined;
    const drain = async () => {
      while (waiting.length > 0 && !closed) {
        const responses = waiting;
        waiting = [];
        await o.handle(responses, writable);
      }
    };
    try {
      const reader = (async () => {
        for await (const res of call as AsyncIterable<R>) {
          if (!got.any) {
            got.any = true;
            await this.#o.bridge.sourceUp(activity);
          }
          if (o.route && !o.route(res)) continue;
          waiting.push(res);
          draining ??= drain().finally(() => {
            draining = undefined;
          });
          draining.catch(fail);
        }
        throw new Error('the subscription stream ended');
      })();
      await Promise.race([reader, ended]);
    } catch (err) {
      fail(err);
      throw err;
    } finally {
      closed = true;
      this.#calls.delete(call as grpc.ClientDuplexStream<unknown, unknown>);
      call.cancel();
      await draining?.catch(() => undefined);
    }
  }

  async #toSourceEvent(
    topic: string,
    ev: { id: string; schema_id: string; payload: Buffer; headers: { key: string; value: Buffer }[] },
  ): Promise<SourceEvent | undefined> {
    const bridge = this.#o.bridge;
    let payload: Record<string, unknown>;
    try {
      payload = decodeEvent(await this.#schema(ev.schema_id), ev.payload);
    } catch (err) {
      bridge.refuse('malformed', {
        sourceId: ev.id,
        type: topic,
        message: `payload is not Avro of schema ${ev.schema_id}: ${(err as Error).message}`,
      });
      return undefined;
    }
    const header = payload.ChangeEventHeader as
      | { changeType?: string; commitUser?: string; commitTimestamp?: number }
      | undefined;
    const traceparent = ev.headers.find((h) => h.key.toLowerCase() === 'traceparent')?.value.toString('utf8');
    const tracestate = ev.headers.find((h) => h.key.toLowerCase() === 'tracestate')?.value.toString('utf8');
    const valid = traceparent && /^[\da-f]{2}-[\da-f]{32}-[\da-f]{16}-[\da-f]{2}$/.test(traceparent);
    return {
      id: ev.id,
      type: header?.changeType ? `${topic}:${header.changeType}` : topic,
      user: header?.commitUser ?? (payload.CreatedById as string | undefined),
      timeMs: header?.commitTimestamp ?? (payload.CreatedDate as number | undefined),
      payload,
      ...(valid ? { trace: { traceparent, ...(tracestate ? { tracestate } : {}) } } : {}),
    };
  }

  #schema(id: string): Promise<AvroType> {
    let s = this.#schemas.get(id);
    if (!s) {
      s = this.#unary<{ schema_json: string }>('GetSchema', { schema_id: id }).then((r) =>
        parseSchema(r.schema_json),
      );
      s.catch(() => this.#schemas.delete(id));
      this.#schemas.set(id, s);
    }
    return s;
  }

  async #unary<T>(method: 'GetSchema' | 'GetTopic' | 'Publish', req: unknown): Promise<T> {
    const md = await this.#o.auth.metadata();
    return new Promise<T>((resolve, reject) => {
      (
        this.#client[method] as (
          r: unknown,
          m: grpc.Metadata,
          cb: (e: grpc.ServiceError | null, r?: T) => void,
        ) => void
      ).call(this.#client, req, md, (err, res) => (err ? reject(err) : resolve(res as T)));
    });
  }

  /**
   * Publishes one event on `topic` (a Platform Event): fields missing from `fields` are null where
   * the schema allows it; `CreatedDate` defaults to now and `CreatedById` to `createdById`.
   */
  async publish(
    topic: string,
    fields: Record<string, unknown>,
    createdById = '005000000000000AAA',
  ): Promise<{ replayId: string; eventId: string }> {
    let schemaId = this.#topicSchemas.get(topic);
    if (!schemaId) {
      schemaId = this.#unary<{ schema_id: string; can_publish: boolean }>('GetTopic', {
        topic_name: topic,
      }).then((t) => {
        if (!t.can_publish) throw new Error(`topic ${topic} does not allow publishing`);
        return t.schema_id;
      });
      schemaId.catch(() => this.#topicSchemas.delete(topic));
      this.#topicSchemas.set(topic, schemaId);
    }
    const sid = await schemaId;
    const type = await this.#schema(sid);
    const record: Record<string, unknown> = {};
    for (const f of (type as unknown as { fields: { name: string }[] }).fields) {
      record[f.name] =
        fields[f.name] ??
        (f.name === 'CreatedDate' ? Date.now() : f.name === 'CreatedById' ? createdById : null);
    }
    const eventId = randomUUID();
    const res = await this.#unary<{ results: { replay_id: Buffer; error?: { msg: string } | null }[] }>(
      'Publish',
      {
        topic_name: topic,
        events: [{ id: eventId, schema_id: sid, payload: type.toBuffer(record), headers: [] }],
      },
    );
    const r = res.results[0];
    if (!r || r.error) throw new Error(`publish refused: ${r?.error?.msg ?? 'no result'}`);
    return { replayId: r.replay_id.toString('base64'), eventId };
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
