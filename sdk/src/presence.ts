/**
 * Presence and work status: heartbeats on `parley.in.<id>.presence` every 10 s while connected,
 * one at each change, and `offline` on close. The registry turns a participant whose heartbeats stop
 * `offline` by itself after its TTL (30 s by default), so a crashed agent does not stay `online`.
 */
import type { Msg, NatsConnection } from '@nats-io/transport-node';
import {
  decodeReply,
  encodeJson,
  type PresenceHeartbeat,
  type PresenceState,
  requestFailure,
  subjects,
} from '@parley/contracts';
import * as z from 'zod';
import type { ReportFailure } from './failures.js';

/** Heartbeat settings. */
export interface PresenceOptions {
  /** Milliseconds between heartbeats. @default 10000 */
  intervalMs?: number;
}

/** The default heartbeat interval. */
export const HEARTBEAT_INTERVAL_MS = 10_000;

/** What the registry answers a heartbeat that asked for an answer. */
const HeartbeatAck = z.object({ ok: z.literal(true) });

/** A participant's own presence: what it tells the registry. */
export class PresenceReporter {
  readonly #nc: NatsConnection;
  readonly #subject: string;
  #state: PresenceState = 'online';
  #activity: string | undefined;
  #timer: NodeJS.Timeout | undefined;
  #intervalMs = HEARTBEAT_INTERVAL_MS;
  readonly #report: ReportFailure;

  /** @internal created by {@link Agent} */
  constructor(nc: NatsConnection, participantId: string, report: ReportFailure = () => undefined) {
    this.#nc = nc;
    this.#report = report;
    this.#subject = subjects.presence(participantId);
  }

  /** The state last set. */
  get state(): PresenceState {
    return this.#state;
  }

  /** The activity line last set. */
  get activity(): string | undefined {
    return this.#activity;
  }

  /**
   * Sets the state (`online`, `busy`, `needs_input` — which notifies the agent's owner) and a short
   * activity line, e.g. `agent.presence.set('busy', 'reviewing PR 42')`; sent at once, and resolved
   * once the registry stored it (a read of presence right after sees it). Rejects with the
   * registry's refusal, or `DEADLINE_EXCEEDED` / `UNAVAILABLE` when it did not answer; the
   * heartbeats keep sending the new state either way. `offline` while connected says the
   * participant cannot work (a bridge whose source system is down), with the reason as the
   * activity; heartbeats keep saying so until another state is set.
   */
  async set(state: PresenceState, activity?: string): Promise<void> {
    this.#state = state;
    this.#activity = activity;
    if (this.#nc.isClosed()) return;
    let reply: Msg;
    try {
      reply = await this.#nc.request(this.#subject, encodeJson(this.#heartbeat()), { timeout: 5_000 });
    } catch (err) {
      throw requestFailure(err, this.#subject);
    }
    decodeReply(HeartbeatAck, reply, 'presence reply');
  }

  #heartbeat(): PresenceHeartbeat {
    return { state: this.#state, ...(this.#activity ? { activity: this.#activity } : {}) };
  }

  /** Starts heartbeating (connect() does this unless `presence: false`). */
  async start(options: PresenceOptions = {}): Promise<void> {
    this.#intervalMs = options.intervalMs ?? HEARTBEAT_INTERVAL_MS;
    this.#schedule();
    await this.#beat();
  }

  /** Stops heartbeating and says `offline` (close() does this). */
  async stop(): Promise<void> {
    const wasRunning = this.#timer !== undefined;
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    // Goes out with the connection's next write (an agent's close drains its connection next), not
    // awaited: a flush while the server is away would wait for it to come back.
    if (wasRunning && !this.#nc.isClosed())
      this.#nc.publish(this.#subject, encodeJson({ state: 'offline' } satisfies PresenceHeartbeat));
  }

  #schedule(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = setInterval(
      () => void this.#beat().catch((err: unknown) => this.#report(err, 'presence')),
      this.#intervalMs,
    );
    this.#timer.unref();
  }

  async #beat(): Promise<void> {
    if (this.#nc.isClosed()) return;
    this.#nc.publish(this.#subject, encodeJson(this.#heartbeat()));
    // Not reaching the server now is reported, not thrown: the next heartbeat tries again, and the
    // registry only marks the participant offline after its TTL.
    await this.#nc.flush().catch((err: unknown) => this.#report(err, 'presence'));
  }
}
