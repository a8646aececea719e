/**
 * Request/reply for the send path without nats.js's per-request bookkeeping (its request builds an
 * Error, with a stack trace, for every request it completes). One subscription under the
 * participant's own reply prefix receives every reply; a map pairs them with their callers.
 */
import {
  type Msg,
  type MsgHdrs,
  type NatsConnection,
  nuid,
  type Subscription,
} from '@nats-io/transport-node';
import { ParleyError } from '@parley/contracts';

export class ReplyMux {
  readonly #pending = new Map<
    string,
    { resolve(m: Msg): void; reject(e: unknown): void; timer: NodeJS.Timeout }
  >();
  readonly #prefix: string;
  #sub: Subscription | undefined;
  #next = 0;

  constructor(
    private readonly nc: NatsConnection,
    replyPrefix: string,
  ) {
    this.#prefix = `${replyPrefix}.${nuid.next()}`;
    void (async () => {
      // A reply owed over a connection that was lost never comes: fail those requests now so the
      // send path retries (under the same client id) as soon as the connection is back.
      for await (const st of nc.status()) {
        if (st.type !== 'disconnect') continue;
        for (const p of this.#pending.values()) {
          clearTimeout(p.timer);
          p.reject(new ParleyError('UNAVAILABLE', 'the connection to NATS was lost', { retryAfterMs: 250 }));
        }
        this.#pending.clear();
      }
    })().catch(() => undefined);
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
        // The server answers a request nobody listens to with a 503 status.
        if (msg.headers?.code === 503) {
          p.reject(
            new ParleyError('UNAVAILABLE', `nothing is serving ${msg.subject}: is Parley running?`, {
              retryAfterMs: 500,
            }),
          );
        } else p.resolve(msg);
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

  /** Publishes `data` to `subject` and resolves with the reply, or rejects after `timeoutMs`. */
  request(subject: string, data: Uint8Array, timeoutMs: number, headers?: MsgHdrs): Promise<Msg> {
    if (!this.#sub) this.#subscribe();
    const token = (this.#next++).toString(36);
    return new Promise<Msg>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(token);
        reject(new ParleyError('DEADLINE_EXCEEDED', `no reply on ${subject} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#pending.set(token, { resolve, reject, timer });
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
            ? new ParleyError('PAYLOAD_TOO_LARGE', `cannot publish to ${subject}: ${message}`, { cause: err })
            : new ParleyError('UNAVAILABLE', `cannot publish to ${subject}: ${message}`, {
                cause: err,
                retryAfterMs: 500,
              }),
        );
      }
    });
  }

  /** Rejects what is pending and stops listening. */
  close(): void {
    for (const p of this.#pending.values()) {
      clearTimeout(p.timer);
      p.reject(new ParleyError('UNAVAILABLE', 'connection closing'));
    }
    this.#pending.clear();
    this.#sub?.unsubscribe();
  }
}
