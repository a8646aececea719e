/**
 * Whether a NATS connection is connected, as its status events tell, and a wait for it.
 *
 * nats.js (3.x) drops what is published while it reconnects: every dial attempt resets the
 * connection's outbound buffer (`prepare()` → `resetOutbound()` in nats-core's protocol.js), so a
 * request published between two attempts is never sent and waits for its whole timeout. Measured
 * right after a nats-server restart: an SDK send took 5.1 s (its first try lost, the retry after
 * the 5 s try timeout answered), a `registry.createAgent` failed after 5 s. Parley's request paths
 * therefore publish only while connected: a request made while the connection is away waits for the
 * reconnect within its own deadline, and what was in flight when the connection was lost is failed
 * at once (its request or its reply may be gone) so a retry goes out as soon as it is back.
 * {@link holdRequestsWhileAway} does the same for every `nc.request` of a connection, so the
 * JetStream clients' own API calls (KV reads and writes, consumer info, `js.publish`) wait too.
 */
import { errors, type NatsConnection } from '@nats-io/nats-core';
import { coalesceWrites } from './write-coalescing.js';

/** The part of a NATS connection a {@link ConnectionWatch} reads (structurally: no NATS client needed). */
export interface StatusSource {
  status(): AsyncIterable<{ type: string }>;
  isClosed(): boolean;
}

/** The connected state of one NATS connection. Get it with {@link watchConnection}. */
export class ConnectionWatch {
  #connected: boolean;
  #closed: boolean;
  readonly #waiters = new Set<(connected: boolean) => void>();
  readonly #lost = new Set<() => void>();

  constructor(nc: StatusSource) {
    this.#closed = nc.isClosed();
    this.#connected = !this.#closed;
    if (this.#closed) return;
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === 'disconnect') {
          this.#connected = false;
          for (const fn of this.#lost) fn();
        } else if (s.type === 'reconnect') {
          this.#connected = true;
          this.#wake(true);
        }
      }
    })()
      .catch(() => undefined)
      .finally(() => {
        // The status iterator ends when the connection closes.
        this.#closed = true;
        this.#connected = false;
        this.#wake(false);
      });
  }

  /** True while connected (as of the last status event). */
  get connected(): boolean {
    return this.#connected;
  }

  /** Resolves `true` once connected (at once when it is), `false` when `timeoutMs` pass first or the connection closes. */
  whenConnected(timeoutMs: number): Promise<boolean> {
    if (this.#connected) return Promise.resolve(true);
    if (this.#closed) return Promise.resolve(false);
    return new Promise((resolve) => {
      const done = (connected: boolean) => {
        clearTimeout(timer);
        this.#waiters.delete(done);
        resolve(connected);
      };
      const timer = setTimeout(() => done(false), timeoutMs);
      this.#waiters.add(done);
    });
  }

  /** Calls `fn` each time the connection is lost. Returns the function that stops it. */
  onLost(fn: () => void): () => void {
    this.#lost.add(fn);
    return () => this.#lost.delete(fn);
  }

  #wake(connected: boolean): void {
    for (const done of [...this.#waiters]) done(connected);
  }
}

const watches = new WeakMap<StatusSource, ConnectionWatch>();

/** The {@link ConnectionWatch} of `nc`: one per connection, made on first use. */
export function watchConnection(nc: StatusSource): ConnectionWatch {
  let w = watches.get(nc);
  if (!w) {
    w = new ConnectionWatch(nc);
    watches.set(nc, w);
  }
  return w;
}

/**
 * Makes `nc.request` wait for the connection while it is away (within the request's timeout)
 * instead of letting nats.js drop the request. Every JetStream call of `@nats-io/jetstream` and
 * `@nats-io/kv` is such a request: measured after a nats-server kill -9 under load, the fan-out's
 * lease KV step made while it reconnected waited out its 5 s timeout, all 16 partition leases
 * lapsed and were taken back only 5.4 s after the restart. A request whose timeout passes first
 * fails with nats.js's own `TimeoutError`, as it would have, so callers read it as before.
 */
export function holdRequestsWhileAway(nc: NatsConnection): void {
  const watch = watchConnection(nc);
  const request = nc.request.bind(nc);
  const later = async (...[subject, payload, opts]: Parameters<NatsConnection['request']>) => {
    // nats.js's default request timeout.
    const left = await timeLeftOnceConnected(watch, opts?.timeout ?? 1_000);
    // Closed meanwhile: the request below fails as nats.js fails it.
    if (left === undefined && !nc.isClosed()) throw new errors.TimeoutError();
    return request(subject, payload, { ...opts, timeout: left ?? 1 });
  };
  // Connected (the usual case): nats.js's request itself, nothing added.
  nc.request = (subject, payload, opts) =>
    watch.connected ? request(subject, payload, opts) : later(subject, payload, opts);
}

/** What {@link failConnectOnEarlyClose} reads of nats.js's protocol handler (not public API). */
interface ProtocolInternals {
  prepare?: () => { reject(err: Error): void };
  transport?: { closed(): Promise<unknown> };
}

/**
 * Makes a reconnect attempt fail at once when the server closes it before answering the connect
 * (after its INFO, before the PONG), so the next attempt goes out after `reconnectTimeWait`. nats.js
 * (3.x) reports that close as a disconnect but leaves the attempt waiting for the PONG until its
 * connect `timeout` (20 s by default). A nats-server stopping on SIGTERM takes reconnects and closes
 * them while it shuts down: a connection that made its last attempt there stayed down 15 s and more
 * after the server was back (`reconnect-requests.test.ts` in clean clones, sessions 32–34: no status
 * event after the restart, nats.js still dialing). Reads nats.js's protocol handler; where it differs
 * (another nats.js), nothing is changed.
 */
export function failConnectOnEarlyClose(nc: NatsConnection): void {
  const protocol = (nc as unknown as { protocol?: ProtocolInternals }).protocol;
  const prepare = protocol?.prepare;
  if (!protocol || typeof prepare !== 'function') return;
  protocol.prepare = () => {
    const pong = prepare.call(protocol);
    // Settled already (the attempt connected, or failed), a rejection changes nothing.
    void protocol.transport
      ?.closed()
      .then(() =>
        pong.reject(
          new errors.ConnectionError('the server closed the connection before it answered the connect'),
        ),
      );
    return pong;
  };
}

/**
 * What every NATS connection Parley makes gets (kit's `connectNats`, the SDK's `connect`): one socket
 * write per event-loop turn ({@link coalesceWrites}), requests held while it reconnects
 * ({@link holdRequestsWhileAway}), and a reconnect attempt the server closes before its PONG tried
 * again at once ({@link failConnectOnEarlyClose}).
 */
export function adoptConnection(nc: NatsConnection): NatsConnection {
  coalesceWrites(nc);
  holdRequestsWhileAway(nc);
  failConnectOnEarlyClose(nc);
  return nc;
}

/**
 * Waits until `watch`'s connection is connected, within `timeoutMs`: resolves with the part of
 * `timeoutMs` left (≥ 1), or undefined when it did not come back in time or closed.
 */
export async function timeLeftOnceConnected(
  watch: ConnectionWatch,
  timeoutMs: number,
): Promise<number | undefined> {
  if (watch.connected) return timeoutMs;
  const started = Date.now();
  if (!(await watch.whenConnected(timeoutMs))) return undefined;
  return Math.max(1, timeoutMs - (Date.now() - started));
}
