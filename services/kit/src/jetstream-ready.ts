/**
 * Waiting out a JetStream that is briefly unavailable while a service starts.
 *
 * A cluster that just said it is ready (or a node that just restarted) answers JetStream API calls
 * only once its meta leader is elected and the stream's Raft group has a leader: until then a call
 * times out, finds no responders (which the client reports as "jetstream is not enabled") or is
 * refused with "JetStream system temporarily unavailable". A service start that gave up on the
 * first such answer died (a KV watch of the policy bucket, seen right after a 3-node cluster came
 * up; a rooms replica on a timeout under load). Start-time calls go through
 * {@link retryJetStream}: retried with a short backoff until a deadline, then a clear error.
 */
import { type JetStreamManager, jetstreamManager } from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import { errors, type NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { jsErrorCode } from './nats-errors.js';

/**
 * JetStream API codes (nats-server `errors.json`) of a cluster not ready yet: `JetStream system
 * temporarily unavailable` (10008), `JetStream cluster can not handle request` (10009, no leader),
 * `stream is offline` (10118), `consumer is offline` (10119).
 */
const NOT_READY_CODES = new Set([10008, 10009, 10118, 10119]);

/**
 * True when `err` says JetStream did not answer yet rather than refused the call: a timeout, no
 * responders ("jetstream is not enabled", which is also what a server still recovering answers), a
 * connection that is reconnecting, or a cluster without a leader for the asset yet.
 */
export function isJetStreamUnavailable(err: unknown): boolean {
  // The client's JetStreamNotEnabled (no responders) is not exported by its main module: by name.
  if (err instanceof Error && err.name === 'JetStreamNotEnabled') return true;
  if (err instanceof errors.TimeoutError) return true;
  if (err instanceof errors.RequestError && err.isNoResponders()) return true;
  if (err instanceof errors.NoRespondersError) return true;
  if (err instanceof errors.ConnectionError) return true;
  const code = jsErrorCode(err);
  if (code !== undefined && NOT_READY_CODES.has(code)) return true;
  // 503 status replies without a JetStream error body.
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === 503;
}

/** Options of {@link retryJetStream}. */
export interface RetryJetStreamOptions {
  /** Where the wait is logged (once when it starts, once when it ends or gives up). */
  log?: Logger | undefined;
  /** How long to keep trying. @default 60000 */
  deadlineMs?: number;
  /** First pause between attempts (doubles up to 2 s). @default 100 */
  firstDelayMs?: number;
}

/** The error {@link retryJetStream} throws when JetStream did not answer before the deadline. */
export class JetStreamUnavailableError extends Error {
  constructor(what: string, ms: number, cause: unknown) {
    super(
      `JetStream did not answer ${what} within ${ms} ms (last: ${(cause as Error)?.message ?? String(cause)}): is nats-server running with JetStream enabled, and does the cluster have a meta leader?`,
      { cause },
    );
    this.name = 'JetStreamUnavailableError';
  }
}

/**
 * Runs `fn` until it answers or fails with something other than {@link isJetStreamUnavailable},
 * retrying with a short backoff until `deadlineMs` has passed; then throws
 * {@link JetStreamUnavailableError} naming `what`. Other errors are thrown at once.
 */
export async function retryJetStream<T>(
  what: string,
  fn: () => Promise<T>,
  o: RetryJetStreamOptions = {},
): Promise<T> {
  const deadlineMs = o.deadlineMs ?? 60_000;
  const started = Date.now();
  let delay = o.firstDelayMs ?? 100;
  for (let attempt = 1; ; attempt++) {
    try {
      const out = await fn();
      if (attempt > 1)
        o.log?.info({ what, attempts: attempt, ms: Date.now() - started }, 'JetStream answered');
      return out;
    } catch (err) {
      if (!isJetStreamUnavailable(err)) throw err;
      const elapsed = Date.now() - started;
      if (elapsed + delay > deadlineMs) {
        const e = new JetStreamUnavailableError(what, elapsed, err);
        o.log?.error({ what, attempts: attempt, ms: elapsed }, e.message);
        throw e;
      }
      if (attempt === 1)
        o.log?.warn({ what, err: (err as Error).message }, 'JetStream not available yet: waiting for it');
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 2_000);
    }
  }
}

/** What a service opens its KV buckets with at start: each open waits out a briefly unavailable JetStream. */
export interface StartKvm {
  open(bucket: string): Promise<KV>;
}

/** A {@link StartKvm} on `nc`. */
export function startKvm(nc: NatsConnection, o: RetryJetStreamOptions = {}): StartKvm {
  const kvm = new Kvm(nc);
  return { open: (bucket) => retryJetStream(`opening bucket ${bucket}`, () => kvm.open(bucket), o) };
}

/** A JetStream manager once the account's JetStream answers (the client checks it when created). */
export function jetstreamManagerReady(
  nc: NatsConnection,
  o: RetryJetStreamOptions = {},
): Promise<JetStreamManager> {
  return retryJetStream('the JetStream account info', () => jetstreamManager(nc), o);
}
