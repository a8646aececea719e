/**
 * Presence and work status: heartbeats on `parley.in.<id>.presence` every 10 s while connected,
 * one at each change, and `offline` on close. The registry turns a participant whose heartbeats stop
 * `offline` by itself after its TTL (30 s by default), so a crashed agent does not stay `online`.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { encodeJson, type PresenceHeartbeat, type PresenceState, subjects } from '@parley/contracts';
import type { ReportFailure } from './failures.js';

/** Heartbeat settings. */
export interface PresenceOptions {
  /** Milliseconds between heartbeats. @default 10000 */
  intervalMs?: number;
}

/** The default heartbeat interval. */
export const HEARTBEAT_INTERVAL_MS = 10_000;

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
   * activity line, e.g. `agent.presence.set('busy', 'reviewing PR 42')`; sent at once. `offline`
   * while connected says the participant cannot work (a bridge whose source system is down), with
   * the reason as the activity; heartbeats keep saying so until another state is set.
   */
  async set(state: PresenceState, activity?: string): Promise<void> {
    this.#state = state;
    this.#activity = activity;
    await this.#beat();
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
    const hb: PresenceHeartbeat = {
      state: this.#state,
      ...(this.#activity ? { activity: this.#activity } : {}),
    };
    this.#nc.publish(this.#subject, encodeJson(hb));
    // Not reaching the server now is reported, not thrown: the next heartbeat tries again, and the
    // registry only marks the participant offline after its TTL.
    await this.#nc.flush().catch((err: unknown) => this.#report(err, 'presence'));
  }
}
