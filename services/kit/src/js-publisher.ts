/**
 * JetStream publishes for the message path without nats.js's per-request bookkeeping: its request
 * (under `js.publish`) completes every successful request by cancelling it with a `RequestError`
 * built with a stack trace — 6.8% of the rooms service's CPU, once per room append and once per
 * inbox write. Here one subscription under the connection's reply prefix receives every PubAck and
 * a map pairs it with its publish: contracts' ReplyMux, which the SDK's sends use too.
 *
 * What it answers matches `js.publish`: `{ stream, seq, duplicate }`, and a refusal rejects with
 * the server's description as the message and its JetStream error code as `code` (e.g. 10071,
 * "wrong last sequence: 41", which `isKvConflict` recognises), so callers switch without changing
 * how they read errors.
 */
import { type Msg, type MsgHdrs, type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import { headerNames, isParleyError, ReplyMux, setHeader } from '@parley/contracts';

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
  readonly #mux: ReplyMux;

  /** `replyPrefix`: the connection's own reply prefix (`_INBOX.<principal>`), which its permissions allow. */
  constructor(nc: NatsConnection, replyPrefix: string) {
    this.#mux = new ReplyMux(nc, `${replyPrefix}.jsp`);
  }

  /**
   * Publishes `data` to `subject` and resolves with JetStream's acknowledgement. While the
   * connection is away the publish waits for it within the timeout (nats.js would drop it); a
   * PubAck owed over a connection that was lost fails at once (the caller retries) instead of after
   * the timeout — after a kill -9 of nats-server that timeout was the longest wait of the fan-out's
   * recovery.
   */
  async publish(subject: string, data: Uint8Array, options: JsPublishOptions = {}): Promise<StoredAck> {
    let h = options.headers;
    if (options.msgID) {
      h ??= natsHeaders();
      setHeader(h, headerNames.msgId, options.msgID);
    }
    const timeoutMs = options.timeoutMs ?? 5_000;
    let msg: Msg;
    try {
      msg = await this.#mux.request(subject, data, timeoutMs, h);
    } catch (err) {
      throw new JsPublishError(
        isParleyError(err, 'DEADLINE_EXCEEDED')
          ? `no acknowledgement for ${subject} within ${timeoutMs} ms`
          : (err as Error).message,
      );
    }
    if (msg.headers?.hasError) {
      // 503: no JetStream (or no stream) answering this subject.
      throw new JsPublishError(`JetStream did not answer: ${msg.headers.description}`, msg.headers.code);
    }
    let r: {
      stream?: string;
      seq?: number;
      duplicate?: boolean;
      error?: { code?: number; err_code?: number; description?: string };
    };
    try {
      r = JSON.parse(dec.decode(msg.data));
    } catch (e) {
      throw new JsPublishError(`JetStream sent an unreadable acknowledgement: ${(e as Error).message}`);
    }
    if (r.error)
      throw new JsPublishError(r.error.description ?? 'JetStream refused the message', r.error.err_code);
    if (typeof r.seq !== 'number' || typeof r.stream !== 'string') {
      throw new JsPublishError('JetStream sent an invalid acknowledgement');
    }
    return { stream: r.stream, seq: r.seq, duplicate: r.duplicate === true };
  }

  /** Subscribes now and waits until the server has the subscription (else early acks are lost). */
  start(): Promise<void> {
    return this.#mux.start();
  }

  /** Rejects what is pending and stops listening. */
  close(): void {
    this.#mux.close();
  }
}
