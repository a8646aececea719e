/**
 * A background worker on a durable consumer: creates the consumer when it does not exist yet (any
 * replica may, they share it), then hands each message to `handle` and acks it; a throw asks
 * `retry` whether to redeliver it later (`nak` after the delay it returns) or give up (`term`).
 */
import type {
  ConsumerConfig,
  ConsumerMessages,
  JetStreamClient,
  JetStreamManager,
  JsMsg,
} from '@nats-io/jetstream';
import type { Logger } from 'pino';
import { retryJetStream } from './jetstream-ready.js';
import { isConsumerExists } from './nats-errors.js';

export interface DurableWorkerOptions {
  js: JetStreamClient;
  jsm: JetStreamManager;
  stream: string;
  consumer: Partial<ConsumerConfig> & { durable_name: string };
  /** Messages pulled at a time. */
  maxMessages: number;
  handle: (m: JsMsg) => Promise<void>;
  /** After `handle` threw: milliseconds until redelivery, or `'term'` to give the message up. */
  retry: (m: JsMsg, err: unknown) => number | 'term';
  /** Where a start waiting for JetStream says so. */
  log?: Logger | undefined;
}

export interface DurableWorker {
  start(): Promise<void>;
  /** Stops pulling and waits for the message in hand. */
  stop(): Promise<void>;
}

/** How long a durable worker's pull request lives, ms. */
export const WORKER_PULL_EXPIRES_MS = 5_000;

export function durableWorker(o: DurableWorkerOptions): DurableWorker {
  let messages: ConsumerMessages | undefined;
  let loop: Promise<void> | undefined;
  let stopped = false;
  return {
    async start() {
      // Usually at a service's start, which may come while the cluster elects leaders (a replica
      // restarted during a fault exited on "JetStream system temporarily unavailable" here).
      const what = `the ${o.consumer.durable_name} consumer of ${o.stream}`;
      await retryJetStream(
        what,
        () =>
          o.jsm.consumers.add(o.stream, o.consumer).catch((err: unknown) => {
            if (!isConsumerExists(err)) throw err;
          }),
        { log: o.log },
      );
      const consumer = await retryJetStream(
        what,
        () => o.js.consumers.get(o.stream, o.consumer.durable_name),
        {
          log: o.log,
        },
      );
      // Pull requests of 5 s (heartbeats every 2.5 s): a request the server drops (nats-server 2.9
      // loses an expired one without a 408, and a request sent to a node that then lost its
      // leadership is gone) is noticed after two missed heartbeats. With the client's default of
      // 30 s that was up to a minute of nothing consumed after a cluster came back
      // (test/cluster/worker-late.test.ts: handled after 35 s, or not within 30 s).
      const iter = await consumer.consume({ max_messages: o.maxMessages, expires: WORKER_PULL_EXPIRES_MS });
      messages = iter;
      loop = (async () => {
        for await (const m of iter) {
          try {
            await o.handle(m);
            m.ack();
          } catch (err) {
            if (stopped) return;
            const after = o.retry(m, err);
            if (after === 'term') m.term();
            else m.nak(after);
          }
        }
      })();
    },
    async stop() {
      stopped = true;
      await messages?.close().catch(() => undefined);
      await loop?.catch(() => undefined);
    },
  };
}
