/**
 * Request/reply on the message path without nats.js's per-request bookkeeping: its request builds
 * an Error, with a stack trace, for every request it completes (6.8% of the rooms service's CPU,
 * once per JetStream publish). One subscription under the connection's own reply prefix receives
 * every reply, and a map pairs each with its request. The SDK's sends and the services' JetStream
 * publishes (kit's `JsPublisher`) go through it.
 *
 * A request made while the connection is away waits for it (nats.js would drop it; see
 * connection.ts) within its timeout; a request in flight when the connection is lost fails at once
 * with `UNAVAILABLE` (its request or its reply may be gone), so a retry goes out as soon as the
 * connection is back instead of after the timeout.
 */
import { type Msg, type MsgHdrs, type NatsConnection, nuid, type Subscription } from '@nats-io/nats-core';
import { type ConnectionWatch, watchConnection } from './connection.js';
import { ParleyError } from './errors.js';

export class ReplyMux {
  readonly #pending = new Map<
    string,
    { resolve(m: Msg): void; reject(e: unknown): void; timer: ReturnType<typeof setTimeout> }
  >();
  readonly #prefix: string;
  readonly #watch: ConnectionWatch;
  #sub: Subscription | undefined;
  #next = 0;

  /** `replyPrefix`: the connection's own reply prefix (`_INBOX.<principal>`), which its permissions allow. */
  constructor(
    private readonly nc: NatsConnection,
    replyPrefix: string,
  ) {
    this.#prefix = `${replyPrefix}.${nuid.next()}`;
    this.#watch = watchConnection(nc);
    this.#watch.onLost(() =>
      this.#failPending(
        new ParleyError('UNAVAILABLE', 'the connection to NATS was lost', { retryAfterMs: 250 }),
      ),
    );
  }

  #failPending(err: ParleyError): void {
    for (const p of this.#pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    this.#pending.clear();
  }

  #subscribe(): void {
    this.#sub = this.nc.subscribe(`${this.#prefix}.*`, {
      callback: (err, msg) => {
        if (err) {
          for (const p of this.#pending.values()) p.reject(err);
          return;
        }
        const token = msg.subject.slice(this.#prefix.length + 1);
        const p = this.#pending.get(token);
        if (!p) return;
        this.#pending.delete(token);
        clearTimeout(p.timer);
        p.resolve(msg);
      },
    });
  }

  /**
   * Subscribes and waits until the server has the subscription: a reply to a request published
   * before the server knew the subscription would be dropped, and the request would time out.
   */
  async start(): Promise<void> {
    if (!this.#sub) this.#subscribe();
    await this.nc.flush();
  }

  /**
   * Publishes `data` to `subject` and resolves with the reply, a status reply (a 503 when nothing
   * listens) included. Rejects with `DEADLINE_EXCEEDED` after `timeoutMs` without one; with
   * `UNAVAILABLE` when the connection was not back within `timeoutMs`, was lost meanwhile, or the
   * publish failed; with `PAYLOAD_TOO_LARGE` when the server's limit refuses `data`.
   */
  request(subject: string, data: Uint8Array, timeoutMs: number, headers?: MsgHdrs): Promise<Msg> {
    if (!this.#sub) this.#subscribe();
    const token = (this.#next++).toString(36);
    return new Promise<Msg>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(token);
        reject(
          this.#watch.connected
            ? new ParleyError('DEADLINE_EXCEEDED', `no reply on ${subject} within ${timeoutMs} ms`)
            : new ParleyError(
                'UNAVAILABLE',
                `not connected to NATS within ${timeoutMs} ms: ${subject} was not sent`,
                {
                  retryAfterMs: 250,
                },
              ),
        );
      }, timeoutMs);
      const entry = { resolve, reject, timer };
      this.#pending.set(token, entry);
      const send = () => {
        try {
          this.nc.publish(subject, data, {
            reply: `${this.#prefix}.${token}`,
            ...(headers ? { headers } : {}),
          });
        } catch (err) {
          clearTimeout(timer);
          this.#pending.delete(token);
          const message = (err as Error).message;
          reject(
            // Too large for the server: retrying cannot help.
            /max_payload/i.test(message)
              ? new ParleyError('PAYLOAD_TOO_LARGE', `cannot publish to ${subject}: ${message}`, {
                  cause: err,
                })
              : new ParleyError('UNAVAILABLE', `cannot publish to ${subject}: ${message}`, {
                  cause: err,
                  retryAfterMs: 500,
                }),
          );
        }
      };
      if (this.#watch.connected) send();
      else
        void this.#watch.whenConnected(timeoutMs).then(() => {
          // Back, or closed (then the publish fails at once): unless timed out or failed meanwhile.
          if (this.#pending.get(token) === entry) send();
        });
    });
  }

  /** Rejects what is pending and stops listening. */
  close(): void {
    this.#failPending(new ParleyError('UNAVAILABLE', 'connection closing'));
    this.#sub?.unsubscribe();
  }
}
