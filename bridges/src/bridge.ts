/**
 * The bridge runtime: a participant of runtime `bridge` that stores source events in rooms and runs
 * room requests as actions on the source system.
 *
 * Inbound, per event: refuse what the source adapter found malformed or unauthenticated (logged,
 * counted, never in a room) · ignore an unmapped type (acknowledged, counted) · map the source user
 * to a Parley user, whose delegation token the message is sent under (never the bridge's own
 * authority for someone else's event) · send with a client message id derived from the source's
 * event id, so a replayed event is stored once · continue the source's W3C trace context · on a
 * refusal Parley will repeat for ever (too large, not a member, bad token), dead-letter the event
 * with its source id and move on. Pull sources persist their cursor after the events were stored.
 *
 * Outbound: a room message with a data part of media type {@link ACTION_MEDIA_TYPE} addressed to
 * this bridge runs the mapped action as an authorized tool call (`agent.tools.call`) under the
 * delegation token the message handed over; without one it is refused, never run on the bridge's
 * own authority. Governance decides and audits; the answer goes back to the room.
 */
import { createHash } from 'node:crypto';
import {
  contextFromTraceFields,
  isParleyError,
  newId,
  otelApi,
  type Part,
  runInSpan,
  startMessagingSpan,
  type Tracer,
} from '@parley/contracts';
import type { Logger } from '@parley/kit';
import type { Agent, Delivery } from '@parley/sdk';
import * as z from 'zod';
import { type BridgeMapping, type InboundRule, type OutboundRule, render, ruleFor } from './mapping.js';
import type { BridgeMetrics, EventOutcome, RefusalReason } from './metrics.js';
import type { BridgeState } from './state.js';

/** Media type of an action request addressed to a bridge. */
export const ACTION_MEDIA_TYPE = 'application/vnd.parley.bridge-action+json';

/** Media type of a bridge's answer to an action request: `{ action, toolCall, result | error }`. */
export const RESULT_MEDIA_TYPE = 'application/vnd.parley.bridge-result+json';

/** The data part of an action request. */
export const ActionRequest = z.object({
  agent: z.string().describe('The bridge that should act.'),
  action: z.string().min(1).max(64),
  args: z.record(z.string(), z.unknown()).default({}),
});
export type ActionRequest = z.infer<typeof ActionRequest>;

/** An event as a source adapter hands it over (already authenticated and decoded). */
export interface SourceEvent {
  /** The source's own id of the event (replay id, CloudEvent id, run id + event type…). */
  id: string;
  type: string;
  /** The source user who caused it (Salesforce commitUser, SAP user…), mapped to a Parley user. */
  user?: string | undefined;
  /** When the source says it happened (ms since the epoch); latency is measured from here. */
  timeMs?: number | undefined;
  payload: unknown;
  /** W3C trace context the source carried. */
  trace?: { traceparent: string; tracestate?: string | undefined } | undefined;
}

/** What became of one event. */
export interface IngestResult {
  outcome: EventOutcome;
  reason?: RefusalReason;
  room?: string;
  message?: string;
}

/** What an action handler gets besides its arguments. */
export interface ActionContext {
  /** The room the request came from. */
  room: string;
  /** The request message's id (stable across redeliveries: an idempotency key for the source). */
  requestId: string;
  /** Posts a progress line in that room (e.g. a job's state while it runs). */
  progress(text: string): Promise<void>;
  /** The Parley user the action runs for. */
  principal: string | undefined;
}

/** Runs one outbound action on the source system; its result feeds the rule's reply template. */
export type ActionHandler = (args: Record<string, unknown>, ctx: ActionContext) => Promise<unknown>;

/** Options of {@link Bridge}. */
export interface BridgeOptions {
  agent: Agent;
  mapping: BridgeMapping;
  state: BridgeState;
  log: Logger;
  metrics: BridgeMetrics;
  /** Where `tokenEnv` identities are read. @default process.env */
  env?: Record<string, string | undefined>;
  tracer?: Tracer | undefined;
}

const RETRYABLE = new Set(['UNAVAILABLE', 'DEADLINE_EXCEEDED', 'RATE_LIMITED', 'INTERNAL']);

/** A source-side failure the adapter should retry after a backoff (the event is not acknowledged). */
export class RetryLater extends Error {
  override name = 'RetryLater';
}

/** `src<sha256(bridge|id)>`: a client message id only this source event maps to. */
export function clientMsgIdOf(bridge: string, sourceId: string, part = 0): string {
  const h = createHash('sha256').update(`${bridge}|${sourceId}|${part}`).digest('base64url');
  return `src${h.slice(0, 40)}`;
}

/** A running bridge. */
export class Bridge {
  readonly agent: Agent;
  readonly mapping: BridgeMapping;
  readonly state: BridgeState;
  readonly metrics: BridgeMetrics;
  readonly #log: Logger;
  readonly #env: Record<string, string | undefined>;
  readonly #tracer: Tracer | undefined;
  readonly #tools = new Map<string, ActionHandler>();
  readonly #observers: ((d: Delivery) => Promise<void> | void)[] = [];
  readonly #opening = new Map<string, Promise<string>>();
  #sourceDown: string | undefined;

  constructor(o: BridgeOptions) {
    this.agent = o.agent;
    this.mapping = o.mapping;
    this.state = o.state;
    this.metrics = o.metrics;
    this.#log = o.log.child({ component: `bridge-${o.mapping.bridge}` });
    this.#env = o.env ?? process.env;
    this.#tracer = o.tracer ?? o.agent.tracer;
  }

  /** The bridge's participant id. */
  get id(): string {
    return this.agent.id;
  }

  /** Why the source is unreachable, while it is. */
  get sourceDownReason(): string | undefined {
    return this.#sourceDown;
  }

  /** The Parley user (and token) a source user maps to. */
  identityFor(sourceUser: string | undefined): { user: string; token: string } | undefined {
    const id = sourceUser === undefined ? undefined : this.mapping.identities[sourceUser];
    if (!id) return undefined;
    const token = id.token ?? (id.tokenEnv ? this.#env[id.tokenEnv] : undefined);
    return token ? { user: id.user, token } : undefined;
  }

  /** An event the adapter could not accept: logged with its reason, counted, never posted. */
  refuse(reason: RefusalReason, detail: { sourceId?: string; type?: string; message: string }): IngestResult {
    this.metrics.event('refused', reason);
    this.#log.warn({ reason, sourceId: detail.sourceId, type: detail.type }, `refused: ${detail.message}`);
    return { outcome: 'refused', reason, message: detail.message };
  }

  /**
   * Stores one event in its room (or ignores, refuses, dead-letters it). Throws {@link RetryLater}
   * when Parley is unavailable: the adapter must not acknowledge the event then.
   */
  async ingest(ev: SourceEvent): Promise<IngestResult> {
    const rule = ruleFor(this.mapping, ev.type);
    if (!rule) {
      this.metrics.event('ignored');
      this.#log.debug({ sourceId: ev.id, type: ev.type }, 'no mapping for this type: ignored');
      return { outcome: 'ignored' };
    }
    const identity = this.identityFor(ev.user);
    if (!identity && this.mapping.requireIdentity) {
      return this.refuse('unmapped_identity', {
        sourceId: ev.id,
        type: ev.type,
        message: `source user ${ev.user ?? '(none)'} maps to no Parley user`,
      });
    }
    const parent = ev.trace ? contextFromTraceFields(ev.trace, otelApi?.ROOT_CONTEXT) : undefined;
    const span = startMessagingSpan(this.#tracer, {
      operation: 'process',
      operationName: 'bridge',
      destination: ev.type,
      target: this.mapping.bridge,
      ...(parent ? { parent } : {}),
    });
    return runInSpan(span, () => this.#store(ev, rule, identity), parent);
  }

  async #store(
    ev: SourceEvent,
    rule: InboundRule,
    identity: { user: string; token: string } | undefined,
  ): Promise<IngestResult> {
    const scope = { id: ev.id, type: ev.type, user: ev.user, principal: identity?.user, payload: ev.payload };
    let room: string;
    try {
      room = await this.#roomFor(rule, scope);
    } catch (err) {
      return this.#failed(ev, err);
    }
    const parts: Part[] = [{ type: 'text', text: render(rule.text, scope) }];
    if (rule.data === true) {
      parts.push({
        type: 'data',
        data: toData(ev.payload),
        ...(rule.mediaType ? { mediaType: rule.mediaType } : {}),
      });
    } else if (rule.data !== false) {
      const data = Object.fromEntries(Object.entries(rule.data).map(([k, t]) => [k, render(t, scope)]));
      parts.push({ type: 'data', data, ...(rule.mediaType ? { mediaType: rule.mediaType } : {}) });
    }
    // A task per key: its id is remembered like a case room (the first event assigns it).
    let task: { id: string; kind: 'task.assigned' | 'task.update' } | undefined;
    if (rule.task) {
      const key = `task:${render(rule.task.key, scope)}`;
      const known = this.state.room(key);
      const id = known ?? newId('task');
      if (!known) await this.state.setRoom(key, id);
      task = { id, kind: known ? 'task.update' : 'task.assigned' };
    }
    const handle = this.agent.rooms.room(room);
    const provenance = {
      trust: 'external' as const,
      source: this.mapping.bridge,
      note: `${ev.type} ${ev.id}`.slice(0, 500),
    };
    try {
      const sent = await handle.send(parts, {
        clientMsgId: clientMsgIdOf(this.mapping.bridge, ev.id),
        mentions: rule.mentions,
        provenance,
        delegation: identity?.token ?? null,
        metadata: { 'source-id': ev.id.slice(0, 200), 'source-type': ev.type.slice(0, 200) },
        deadlineMs: 10_000,
        ...(task ? { task: task.id, kind: task.kind } : {}),
      });
      // Each request goes as its own message: one message hands over one (exchanged) token.
      for (const [i, ask] of rule.ask.entries()) {
        const args = Object.fromEntries(Object.entries(ask.args).map(([k, t]) => [k, render(t, scope)]));
        const handed = identity
          ? (await this.agent.tokens.exchange(identity.token, ask.agent, { room })).token
          : null;
        await handle.send(
          [
            { type: 'text', text: `@${ask.agent} ${ask.action} ${JSON.stringify(args)}` },
            {
              type: 'data',
              data: { agent: ask.agent, action: ask.action, args },
              mediaType: ACTION_MEDIA_TYPE,
            },
          ],
          {
            clientMsgId: clientMsgIdOf(this.mapping.bridge, ev.id, i + 1),
            mentions: [ask.agent],
            replyTo: sent.id,
            delegation: handed,
            deadlineMs: 10_000,
          },
        );
      }
      const outcome: EventOutcome = sent.duplicate ? 'duplicate' : 'stored';
      this.metrics.event(outcome);
      if (ev.timeMs !== undefined) this.metrics.observeLatency(Math.max(0, Date.now() - ev.timeMs) / 1000);
      return { outcome, room, message: sent.id };
    } catch (err) {
      return this.#failed(ev, err);
    }
  }

  async #failed(ev: SourceEvent, err: unknown): Promise<IngestResult> {
    if (isParleyError(err) && RETRYABLE.has(err.code)) {
      throw new RetryLater(`Parley is unavailable: ${err.code} ${err.message}`, { cause: err });
    }
    if (!isParleyError(err)) throw err;
    const reason: RefusalReason = err.code === 'PAYLOAD_TOO_LARGE' ? 'too_large' : 'rejected_by_parley';
    const why = `${err.code}: ${err.message}`;
    await this.state.deadLetter({
      sourceId: ev.id,
      type: ev.type,
      reason: why,
      at: new Date().toISOString(),
    });
    this.metrics.event('dead_lettered', reason);
    this.#log.error({ sourceId: ev.id, type: ev.type, code: err.code }, `dead-lettered: ${why}`);
    if (this.mapping.deadLetterRoom) {
      await this.agent.rooms
        .room(this.mapping.deadLetterRoom)
        .send(
          [
            { type: 'text', text: `dead letter: ${ev.type} ${ev.id}: ${why}` },
            { type: 'data', data: { sourceId: ev.id, type: ev.type, reason: why } },
          ],
          { clientMsgId: clientMsgIdOf(this.mapping.bridge, `dlq:${ev.id}`), deadlineMs: 5_000 },
        )
        .catch((e) => this.#log.warn({ err: e }, 'dead letter not reported in the dead-letter room'));
    }
    return { outcome: 'dead_lettered', reason, message: why };
  }

  async #roomFor(rule: InboundRule, scope: unknown): Promise<string> {
    const to = rule.to;
    if (to.room) return to.room;
    const key = to.agent ? `agent:${to.agent}` : `case:${render(to.case?.key ?? '', scope)}`;
    const known = this.state.room(key);
    if (known) return known;
    // Webhook requests run concurrently: two first events of one case must not open two rooms.
    let opening = this.#opening.get(key);
    if (!opening) {
      opening = this.#openRoom(rule, scope, key).finally(() => this.#opening.delete(key));
      this.#opening.set(key, opening);
    }
    return opening;
  }

  async #openRoom(rule: InboundRule, scope: unknown, key: string): Promise<string> {
    const to = rule.to;
    const title = to.agent
      ? `${this.mapping.bridge} ↔ ${to.agent}`
      : render(to.case?.title ?? key, scope).slice(0, 200);
    // A crash between creating the room and persisting it: find it again by its title.
    const existing = (await this.agent.rooms.list()).find((r) => r.title === title);
    const id =
      existing?.id ??
      (await this.agent.rooms.create(title, { members: to.agent ? [to.agent] : (to.case?.members ?? []) }))
        .id;
    await this.state.setRoom(key, id);
    return id;
  }

  /**
   * Stores a batch in order, then moves the cursor to the last `cursor` given (the position after
   * the batch); an entry without an event (refused by the adapter) only moves the cursor. A cursor
   * given as a function is evaluated when it is persisted.
   * Stops at the first {@link RetryLater}, having persisted the cursor of what was stored.
   */
  async ingestBatch(
    events: { event?: SourceEvent | undefined; cursor?: string | (() => string) }[],
  ): Promise<IngestResult[]> {
    const results: IngestResult[] = [];
    let cursor: string | (() => string) | undefined;
    let stored = 0;
    // The events the cursor moves past (stored, recognised or refused): they leave the journal.
    const covered: string[] = [];
    try {
      for (const e of events) {
        // No event: the adapter refused it already (malformed); only the cursor moves past it.
        if (e.event && this.state.storedSinceCursor(e.event.id)) {
          // Stored before a crash that came before its cursor was written: not sent again.
          this.metrics.event('duplicate');
          results.push({ outcome: 'duplicate' });
        } else if (e.event) {
          const r = await this.ingest(e.event);
          results.push(r);
          if (r.outcome === 'stored') stored++;
          // A duplicate is in the room too (stored before, or by a send the SDK retried).
          if (r.outcome === 'stored' || r.outcome === 'duplicate') await this.state.journal(e.event.id);
        }
        if (e.event) covered.push(e.event.id);
        if (e.cursor !== undefined) cursor = e.cursor;
      }
    } finally {
      // A function is asked now: a source with several streams composes the others' latest cursors.
      if (cursor !== undefined || stored > 0) {
        await this.state.advance(typeof cursor === 'function' ? cursor() : cursor, stored, covered);
      }
    }
    return results;
  }

  /** The source is unreachable: presence `offline` with the reason, the gauge at 0. */
  async sourceDown(reason: string): Promise<void> {
    this.metrics.sourceUp(false);
    if (this.#sourceDown === reason) return;
    this.#sourceDown = reason;
    this.#log.warn({ reason }, 'source unreachable');
    await this.agent.presence
      .set('offline', `source unreachable: ${reason}`.slice(0, 200))
      .catch(() => undefined);
  }

  /** The source answers again. */
  async sourceUp(activity?: string): Promise<void> {
    this.metrics.sourceUp(true);
    if (this.#sourceDown === undefined && activity === undefined) return;
    if (this.#sourceDown !== undefined) this.#log.info('source reachable again');
    this.#sourceDown = undefined;
    await this.agent.presence
      .set('online', activity ?? `connected to ${this.mapping.bridge}`)
      .catch(() => undefined);
  }

  /** Registers the implementation of a tool (what outbound rules name in `tool`). */
  tool(name: string, handler: ActionHandler): this {
    this.#tools.set(name, handler);
    return this;
  }

  /**
   * Also hands every delivered room message to `fn`, after the actions it asked for ran: the place
   * for a bridge's own logic (e.g. proposing a next step once the answers it waited for are in).
   * It runs inside the delivery, so what it sends continues the trace.
   */
  observe(fn: (d: Delivery) => Promise<void> | void): this {
    this.#observers.push(fn);
    return this;
  }

  /** Starts handling action requests from rooms. */
  async start(): Promise<void> {
    this.agent.on('message', async (d) => {
      await this.#onMessage(d);
      for (const fn of this.#observers) await fn(d);
    });
    await this.agent.listening;
  }

  async #onMessage(d: Delivery): Promise<void> {
    for (const part of d.message.parts) {
      if (part.type !== 'data' || part.mediaType !== ACTION_MEDIA_TYPE) continue;
      const req = ActionRequest.safeParse(part.data);
      if (!req.success || req.data.agent !== this.id) continue;
      const rule = this.mapping.outbound.find((r) => r.action === req.data.action);
      await this.#act(d, req.data, rule);
    }
  }

  async #act(d: Delivery, req: ActionRequest, rule: OutboundRule | undefined): Promise<void> {
    const room = this.agent.rooms.room(d.room);
    // A request that is part of a task is answered in that task (`task.update`).
    const task = d.message.task;
    const answer = (text: string, data?: unknown) =>
      room.send(
        [
          { type: 'text', text },
          ...(data !== undefined
            ? [{ type: 'data' as const, data: toData(data), mediaType: RESULT_MEDIA_TYPE }]
            : []),
        ],
        {
          replyTo: d.message.id,
          clientMsgId: clientMsgIdOf(this.mapping.bridge, `reply:${d.message.id}:${req.action}`),
          delegation: null,
          ...(task ? { task, kind: 'task.update' as const } : {}),
        },
      );
    const handler = rule ? this.#tools.get(rule.tool) : undefined;
    if (!rule || !handler) {
      this.metrics.action('unknown', 'error');
      await answer(`${req.action}: this bridge has no such action`);
      return;
    }
    const token = this.agent.tokens.current();
    if (!token) {
      // Acting without the asker's token would be the bridge's own authority: refused.
      this.metrics.action(rule.action, 'denied');
      await answer(`${rule.action} refused: the request carries no delegation token`);
      return;
    }
    const principal = d.message.onBehalfOf?.principal;
    const toolCall = newId('toolCall');
    try {
      const fixed = Object.fromEntries(
        Object.entries(rule.args).map(([k, t]) => [k, render(t, { args: req.args, principal })]),
      );
      const result = await this.agent.tools.call(
        rule.tool,
        { ...req.args, ...fixed },
        (args) =>
          handler(args, {
            room: d.room,
            requestId: d.message.id,
            principal,
            progress: async (text) => {
              await room.send(text, {
                replyTo: d.message.id,
                kind: task ? 'task.update' : 'status',
                delegation: null,
                ...(task ? { task } : {}),
              });
            },
          }),
        { onBehalfOf: token, id: toolCall, ...(rule.scope ? { action: rule.scope } : {}) },
      );
      this.metrics.action(rule.action, 'ok');
      await answer(render(rule.reply, { action: rule.action, args: req.args, result, principal }), {
        action: rule.action,
        toolCall,
        result,
      });
    } catch (err) {
      const denied =
        isParleyError(err) && ['PERMISSION_DENIED', 'EXPIRED', 'REVOKED', 'SUSPENDED'].includes(err.code);
      this.metrics.action(rule.action, denied ? 'denied' : 'error');
      this.#log.warn({ action: rule.action, err }, 'action failed');
      const code = isParleyError(err) ? err.code : 'FAILED';
      await answer(
        `${rule.action} ${denied ? 'refused' : 'failed'}: ${code} ${(err as Error).message}`.slice(0, 4000),
        {
          action: rule.action,
          toolCall,
          error: code,
        },
      );
    }
  }
}

/** A data part's payload must be a JSON object: anything else is wrapped. */
function toData(v: unknown): Record<string, unknown> {
  const json = JSON.parse(
    JSON.stringify(v ?? null, (_k, x) =>
      typeof x === 'bigint' ? x.toString() : Buffer.isBuffer(x) ? x.toString('base64') : x,
    ),
  );
  return json !== null && typeof json === 'object' && !Array.isArray(json) ? json : { value: json };
}
