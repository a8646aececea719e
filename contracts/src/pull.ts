/**
 * The pull loop of a durable pull consumer, in place of nats.js `consume()`.
 *
 * Measured with nats.js 3.4 on nats-server 2.9: a pull request sometimes ends at the server without
 * the `408 Request Timeout` that tells the client how much of it was left. `consume()` then believes
 * it still has messages coming and pulls no more until two heartbeats were missed — a stall of 5 to
 * 10 s with messages waiting (the inbox→handler p99 of the benchmark). Here every pull request has
 * its own reply subject, so each status (heartbeat, 408 with what was left) names its request, and
 * a request is known to be over at its expiry plus a grace, whether or not the server said so.
 * Messages arrive under their own subjects; they are counted against the oldest open request (the
 * server serves waiting requests in order), and a 408 corrects the count when that guess was off.
 *
 * Flow: at most `maxMessages` requested and not yet received; when that falls to three quarters, a
 * new request asks for the difference. A reconnect forgets every request (the server may have lost
 * them) and pulls again; an error answer (no JetStream, consumer gone) retries with backoff and is
 * reported through `onError`.
 */
import {
  createInbox,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
  type Subscription,
} from '@nats-io/nats-core';

/** What a handler needs of a delivered JetStream message. */
export interface PulledMsg {
  /** Stream sequence. */
  readonly seq: number;
  /** The inbox subject it was stored under. */
  readonly subject: string;
  readonly headers: MsgHdrs | undefined;
  readonly data: Uint8Array;
  readonly info: {
    readonly deliveryCount: number;
    readonly timestampNanos: number;
    /** Messages the consumer had left to deliver after this one. */
    readonly pending: number;
  };
  ack(): void;
  /** Acknowledges and resolves once the server confirmed it. */
  ackAck(): Promise<boolean>;
  /** Asks for redelivery, after `delayMs` when given. */
  nak(delayMs?: number): void;
  /** Resets the ack wait. */
  working(): void;
  /** No redelivery (nats-server 2.10+ advises it as terminated). */
  term(): void;
}

export interface PullLoopOptions {
  stream: string;
  consumer: string;
  /** Reply-subject prefix the connection may subscribe under (`_INBOX.<id>`). */
  inboxPrefix: string;
  /** Requested and not yet received, at most (default 256). */
  maxMessages?: number;
  /** Life of a pull request (default 10 s). */
  expiresMs?: number;
  /** Idle heartbeat the server sends while a request waits (default expires / 2). */
  heartbeatMs?: number;
  onMessage: (m: PulledMsg) => void;
  onError?: (err: Error) => void;
}

const ACK = new TextEncoder().encode('+ACK');
const WPI = new TextEncoder().encode('+WPI');
const TERM = new TextEncoder().encode('+TERM');
const NAK = new TextEncoder().encode('-NAK');
const encoder = new TextEncoder();

/** Grace after a request's expiry for its `408` to arrive before it counts as over anyway. */
const GRACE_MS = 1_000;

class DeliveredMsg implements PulledMsg {
  readonly seq: number;
  readonly info: { deliveryCount: number; timestampNanos: number; pending: number };
  #settled = false;

  constructor(
    private readonly nc: NatsConnection,
    private readonly msg: Msg,
  ) {
    // $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending> (2.9), or with
    // <domain>.<account hash> after ACK and a random token at the end (2.10+).
    const t = (msg.reply ?? '').split('.');
    const o = t.length === 9 ? 4 : 6;
    this.info = { deliveryCount: Number(t[o]), timestampNanos: Number(t[o + 3]), pending: Number(t[o + 4]) };
    this.seq = Number(t[o + 1]);
  }

  get subject(): string {
    return this.msg.subject;
  }

  get headers(): MsgHdrs | undefined {
    return this.msg.headers;
  }

  get data(): Uint8Array {
    return this.msg.data;
  }

  ack(): void {
    this.#settle(ACK);
  }

  async ackAck(): Promise<boolean> {
    if (this.#settled || !this.msg.reply) return false;
    this.#settled = true;
    await this.nc.request(this.msg.reply, ACK, { timeout: 5_000 });
    return true;
  }

  nak(delayMs?: number): void {
    this.#settle(delayMs ? encoder.encode(`-NAK ${JSON.stringify({ delay: delayMs * 1e6 })}`) : NAK);
  }

  working(): void {
    if (!this.#settled) this.#send(WPI);
  }

  term(): void {
    this.#settle(TERM);
  }

  /** Only the first ack, nak or term counts, as with nats.js. */
  #settle(body: Uint8Array): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#send(body);
  }

  #send(body: Uint8Array): void {
    if (!this.nc.isClosed() && this.msg.reply) this.nc.publish(this.msg.reply, body);
  }
}

interface PullRequest {
  token: string;
  left: number;
  deadline: number;
}

/** Statistics of a loop, for tests and diagnostics. */
export interface PullLoopStats {
  requests: number;
  /** Requests the server ended without saying so (counted over at expiry + grace). */
  silent: number;
  received: number;
}

export class PullLoop {
  readonly stats: PullLoopStats = { requests: 0, silent: 0, received: 0 };
  readonly #prefix: string;
  readonly #sub: Subscription;
  /** Open requests, oldest first. */
  #open: PullRequest[] = [];
  readonly #max: number;
  readonly #expiresMs: number;
  readonly #heartbeatMs: number;
  readonly #timer: NodeJS.Timeout;
  readonly #status: AsyncIterable<{ type: string }>;
  #n = 0;
  #retryAt = 0;
  #failures = 0;
  #closed = false;

  constructor(
    private readonly nc: NatsConnection,
    private readonly options: PullLoopOptions,
  ) {
    this.#max = options.maxMessages ?? 256;
    this.#expiresMs = options.expiresMs ?? 10_000;
    this.#heartbeatMs = options.heartbeatMs ?? Math.floor(this.#expiresMs / 2);
    this.#prefix = createInbox(options.inboxPrefix);
    this.#sub = nc.subscribe(`${this.#prefix}.*`, {
      callback: (err, m) => {
        if (!err) this.#arrive(m);
      },
    });
    this.#timer = setInterval(() => this.#tick(), Math.min(1_000, this.#expiresMs / 4));
    this.#timer.unref();
    this.#status = nc.status();
    void this.#watchConnection();
    this.#pull();
  }

  /** Stops pulling. Requests still open at the server expire there; what they deliver is redelivered. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    (this.#status as Partial<{ stop(): void }>).stop?.();
    this.#open = [];
    if (!this.nc.isClosed()) this.#sub.unsubscribe();
  }

  #outstanding(): number {
    let n = 0;
    for (const r of this.#open) n += r.left;
    return n;
  }

  #pull(): void {
    if (this.#closed || this.nc.isClosed() || Date.now() < this.#retryAt) return;
    const outstanding = this.#outstanding();
    if (outstanding > this.#max * 0.75) return;
    const batch = this.#max - outstanding;
    const token = `${++this.#n}`;
    this.#open.push({ token, left: batch, deadline: Date.now() + this.#expiresMs + GRACE_MS });
    this.stats.requests++;
    const body = { batch, expires: this.#expiresMs * 1e6, idle_heartbeat: this.#heartbeatMs * 1e6 };
    try {
      this.nc.publish(
        `$JS.API.CONSUMER.MSG.NEXT.${this.options.stream}.${this.options.consumer}`,
        encoder.encode(JSON.stringify(body)),
        { reply: `${this.#prefix}.${token}` },
      );
    } catch (err) {
      this.#open.pop();
      this.#fail(err as Error);
    }
  }

  #arrive(m: Msg): void {
    if (this.#closed) return;
    const code = m.headers?.code ?? 0;
    if (m.reply && code === 0) {
      this.stats.received++;
      this.#failures = 0;
      const oldest = this.#open[0];
      if (oldest && --oldest.left <= 0) this.#open.shift();
      this.options.onMessage(new DeliveredMsg(this.nc, m));
      this.#pull();
      return;
    }
    if (code === 100) return; // idle heartbeat: the request is alive
    // Any other status ends its request: 408 expired, 409 limits or leadership change, 404 no messages.
    const i = this.#open.findIndex((r) => m.subject === `${this.#prefix}.${r.token}`);
    if (i >= 0) {
      const [ended] = this.#open.splice(i, 1);
      // What the server says was left of it; more than counted means newer requests got those.
      let excess = Number(m.headers?.get('Nats-Pending-Messages') || 0) - (ended?.left ?? 0);
      for (let j = this.#open.length - 1; j >= 0 && excess > 0; j--) {
        const r = this.#open[j] as PullRequest;
        const take = Math.min(r.left, excess);
        r.left -= take;
        excess -= take;
      }
      this.#open = this.#open.filter((r) => r.left > 0);
    }
    if (code === 408 || code === 404 || code === 409) {
      if (code === 409 && /consumer deleted/i.test(m.headers?.description ?? ''))
        this.#fail(new Error(`consumer ${this.options.consumer} deleted`));
    } else {
      this.#fail(new Error(`pull answered ${code} ${m.headers?.description ?? ''}`.trim()));
    }
    this.#pull();
  }

  #fail(err: Error): void {
    this.#failures++;
    this.#retryAt = Date.now() + Math.min(10_000, 250 * 2 ** Math.min(this.#failures, 6));
    this.options.onError?.(err);
  }

  #tick(): void {
    const now = Date.now();
    const live = this.#open.filter((r) => r.deadline >= now);
    this.stats.silent += this.#open.length - live.length;
    this.#open = live;
    this.#pull();
  }

  async #watchConnection(): Promise<void> {
    for await (const s of this.#status) {
      if (this.#closed) return;
      if (s.type === 'reconnect') {
        this.#open = [];
        this.#retryAt = 0;
        this.#pull();
      }
    }
  }
}
