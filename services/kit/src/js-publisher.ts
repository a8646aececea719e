/**
 * JetStream publishes for the message path without nats.js's per-request bookkeeping: its request
 * (under `js.publish`) completes every successful request by cancelling it with a `RequestError`
 * built with a stack trace — 6.8% of the rooms service's CPU, once per room append and once per
 * inbox write. Here one subscription under the connection's reply prefix receives every PubAck and
 * a map pairs it with its publish (as the SDK's send path does, sdk/src/replies.ts).
 *
 * What it answers matches `js.publish`: `{ stream, seq, duplicate }`, and a refusal rejects with
 * the server's description as the message and its JetStream error code as `code` (e.g. 10071,
 * "wrong last sequence: 41", which `isKvConflict` recognises), so callers switch without changing
 * how they read errors.
 */
import {
  type MsgHdrs,
  type NatsConnection,
  headers as natsHeaders,
  nuid,
  type Subscription,
} from '@nats-io/transport-node';
import { headerNames, setHeader } from '@parley/contracts';

/** What JetStream answered for a stored message. */
export interface StoredAck {
  stream: string;
  seq: number;
  duplicate: boolean;
}

/** A publish JetStream refused or did not answer. */
export class JsPublishError extends Error {
  constructor(
    message: string,
    /** JetStream's error code (e.g. 10071 wrong last sequence), or the status code (503). */
    readonly code?: number,
  ) {
    super(message);
    this.name = 'JsPublishError';
  }
}

/** Options of {@link JsPublisher.publish}. */
export interface JsPublishOptions {
  /** `Nats-Msg-Id`: de-duplication within the stream's window. */
  msgID?: string;
  headers?: MsgHdrs;
  /** Rejects after this long without an answer. @default 5000 */
  timeoutMs?: number;
}

const dec = new TextDecoder();

/** Publishes to JetStream streams over one connection, pairing PubAcks through one subscription. */
export class JsPublisher {
  readonly #pending = new Map<
    string,
    { resolve(a: StoredAck): void; reject(e: Error): void; timer: NodeJS.Timeout }
  >();
  readonly #prefix: string;
  #sub: Subscription | undefined;
  #next = 0;

  /** `replyPrefix`: the connection's own reply prefix (`_INBOX.<principal>`), which its permissions allow. */
  constructor(
    private readonly nc: NatsConnection,
    replyPrefix: string,
  ) {
    this.#prefix = `${replyPrefix}.jsp${nuid.next()}`;
    void (async () => {
      // A PubAck owed by a server we lost the connection to never comes: fail those publishes now
      // (the caller retries) instead of after the timeout — after a kill -9 of nats-server that
      // timeout was the longest wait of the fan-out's recovery.
      for await (const st of nc.status()) {
        if (st.type === 'disconnect') this.#failPending('the connection to nats-server was lost');
      }
    })().catch(() => undefined);
  }

  #failPending(reason: string): void {
    for (const p of this.#pending.values()) {
      clearTimeout(p.timer);
      p.reject(new JsPublishError(reason));
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
        if (msg.headers?.hasError) {
          // 503: no JetStream (or no stream) answering this subject.
          p.reject(
            new JsPublishError(`JetStream did not answer: ${msg.headers.description}`, msg.headers.code),
          );
          return;
        }
        try {
          const r = JSON.parse(dec.decode(msg.data)) as {
            stream?: string;
            seq?: number;
            duplicate?: boolean;
            error?: { code?: number; err_code?: number; description?: string };
          };
          if (r.error) {
            p.reject(
              new JsPublishError(r.error.description ?? 'JetStream refused the message', r.error.err_code),
            );
          } else if (typeof r.seq !== 'number' || typeof r.stream !== 'string') {
            p.reject(new JsPublishError('JetStream sent an invalid acknowledgement'));
          } else {
            p.resolve({ stream: r.stream, seq: r.seq, duplicate: r.duplicate === true });
          }
        } catch (e) {
          p.reject(
            new JsPublishError(`JetStream sent an unreadable acknowledgement: ${(e as Error).message}`),
          );
        }
      },
    });
  }

  /** Publishes `data` to `subject` and resolves with JetStream's acknowledgement. */
  publish(subject: string, data: Uint8Array, options: JsPublishOptions = {}): Promise<StoredAck> {
    if (!this.#sub) this.#subscribe();
    const token = (this.#next++).toString(36);
    let h = options.headers;
    if (options.msgID) {
      h ??= natsHeaders();
      setHeader(h, headerNames.msgId, options.msgID);
    }
    const timeoutMs = options.timeoutMs ?? 5_000;
    return new Promise<StoredAck>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(token);
        reject(new JsPublishError(`no acknowledgement for ${subject} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#pending.set(token, { resolve, reject, timer });
      try {
        this.nc.publish(subject, data, { reply: `${this.#prefix}.${token}`, ...(h ? { headers: h } : {}) });
      } catch (err) {
        clearTimeout(timer);
        this.#pending.delete(token);
        reject(err as Error);
      }
    });
  }

  /** Subscribes now and waits until the server has the subscription (else early acks are lost). */
  async start(): Promise<void> {
    if (!this.#sub) this.#subscribe();
    await this.nc.flush();
  }

  /** Rejects what is pending and stops listening. */
  close(): void {
    this.#failPending('connection closing');
    this.#sub?.unsubscribe();
  }
}
