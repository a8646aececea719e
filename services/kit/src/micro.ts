/**
 * The NATS services protocol (ADR-32, what `nats micro ls|info|stats` reads), for async handlers.
 *
 * Why not `@nats-io/services`: its only v3 release is a prerelease built on an older nats-core, and
 * it measures processing time and counts errors only for the synchronous part of a handler, so every
 * async Parley handler would show zero errors and near-zero latency. This keeps the same wire format.
 */
import { type Msg, type NatsConnection, nuid, type Subscription } from '@nats-io/transport-node';
import { respondTo } from './reply.js';

const enc = new TextEncoder();

/** Settings of a service. */
export interface MicroServiceConfig {
  /** Service name, e.g. `parley-rooms` (letters, digits, `-`, `_`). */
  name: string;
  /** Semantic version. */
  version: string;
  description?: string;
  metadata?: Record<string, string>;
}

/** An endpoint as INFO and STATS report it. */
export interface EndpointConfig {
  /** Name in the stats, e.g. `rooms.create`. */
  name: string;
  /** Subject, may contain wildcards. */
  subject: string;
  /** Queue group. */
  queue: string;
  metadata?: Record<string, string>;
}

/** Runs requests of one endpoint and keeps its stats. */
export interface Endpoint {
  /**
   * Runs `work` for a request. `work` answers the request itself and resolves with an error
   * description when its answer was an error (counted in the stats), or undefined on success.
   */
  run(work: () => Promise<string | undefined>): void;
}

/** A running service. */
export interface MicroService {
  readonly id: string;
  readonly name: string;
  /** Registers an endpoint for INFO/STATS; requests reach it through {@link subscribe}. */
  endpoint(config: EndpointConfig): Endpoint;
  /** A queue subscription owned by the service (drained by {@link stop}). */
  subscribe(subject: string, queue: string, onMessage: (msg: Msg) => void): void;
  /** Stats in the protocol's shape. */
  stats(): Record<string, unknown>;
  /** Drains every subscription and waits for in-flight work. */
  stop(): Promise<void>;
}

interface EndpointState {
  config: EndpointConfig;
  num_requests: number;
  num_errors: number;
  last_error: string;
  processing_time: number;
}

const NAME = /^[A-Za-z0-9_-]+$/;

/** Starts a service on `nc` and answers `$SRV.PING|INFO|STATS` for it. */
export function createMicroService(nc: NatsConnection, config: MicroServiceConfig): MicroService {
  if (!NAME.test(config.name)) throw new Error(`invalid service name: ${config.name}`);
  const id = nuid.next();
  const started = new Date().toISOString();
  const endpoints: EndpointState[] = [];
  const subs: Subscription[] = [];
  const inflight = new Set<Promise<unknown>>();
  const identity = () => ({
    name: config.name,
    id,
    version: config.version,
    metadata: config.metadata ?? {},
  });
  const endpointInfo = (e: EndpointState) => ({
    name: e.config.name,
    subject: e.config.subject,
    queue_group: e.config.queue,
    metadata: e.config.metadata ?? null,
  });

  function stats() {
    return {
      type: 'io.nats.micro.v1.stats_response',
      ...identity(),
      started,
      endpoints: endpoints.map((e) => ({
        name: e.config.name,
        subject: e.config.subject,
        queue_group: e.config.queue,
        num_requests: e.num_requests,
        num_errors: e.num_errors,
        last_error: e.last_error,
        processing_time: e.processing_time,
        average_processing_time: e.num_requests === 0 ? 0 : Math.round(e.processing_time / e.num_requests),
      })),
    };
  }

  const verbs: Record<string, () => unknown> = {
    PING: () => ({ type: 'io.nats.micro.v1.ping_response', ...identity() }),
    INFO: () => ({
      type: 'io.nats.micro.v1.info_response',
      ...identity(),
      description: config.description ?? '',
      endpoints: endpoints.map(endpointInfo),
    }),
    STATS: stats,
  };
  for (const [verb, answer] of Object.entries(verbs)) {
    for (const subject of [
      `$SRV.${verb}`,
      `$SRV.${verb}.${config.name}`,
      `$SRV.${verb}.${config.name}.${id}`,
    ]) {
      subs.push(
        nc.subscribe(subject, {
          callback: (err, msg) => {
            // Discovery answers go to an inbox only, like every reply (reply.ts).
            if (!err) respondTo(msg, enc.encode(JSON.stringify(answer())));
          },
        }),
      );
    }
  }

  return {
    id,
    name: config.name,
    endpoint(ep) {
      const state: EndpointState = {
        config: ep,
        num_requests: 0,
        num_errors: 0,
        last_error: '',
        processing_time: 0,
      };
      endpoints.push(state);
      return {
        run(work) {
          const start = process.hrtime.bigint();
          state.num_requests++;
          const done = (error: string | undefined) => {
            state.processing_time += Number(process.hrtime.bigint() - start);
            if (error !== undefined) {
              state.num_errors++;
              state.last_error = error;
            }
          };
          const p = work().then(done, (thrown: unknown) =>
            done(String((thrown as Error)?.message ?? thrown)),
          );
          inflight.add(p);
          void p.finally(() => inflight.delete(p));
        },
      };
    },
    subscribe(subject, queue, onMessage) {
      subs.push(
        nc.subscribe(subject, {
          queue,
          callback: (err, msg) => {
            if (!err) onMessage(msg);
          },
        }),
      );
    },
    stats,
    async stop() {
      await Promise.allSettled(subs.map((s) => (s.isClosed() ? undefined : s.drain())));
      await Promise.allSettled([...inflight]);
    },
  };
}
