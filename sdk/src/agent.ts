import { jetstreamManager } from '@nats-io/jetstream';
import { type NatsConnection, nuid } from '@nats-io/transport-node';
import {
  type ApiMethod,
  type ApiRequest,
  type ApiResponse,
  defaultTracer,
  inboxStream,
  isParleyError,
  ParleyError,
  ReplyMux,
  registryApi,
  request,
  roomsApi,
  subjects,
  type Tracer,
  type WhoAmI,
} from '@parley/contracts';
import { Approvals } from './approvals.js';
import { Bindings } from './bindings.js';
import { type ConnectOptions, connectWithCreds, drainConnection } from './connect.js';
import { Contacts } from './contacts.js';
import {
  type Backfill,
  type Delivery,
  type DeliveryEngine,
  type DeliveryEvent,
  type DeliveryOptions,
  DeliveryEngine as Engine,
  type PullBatch,
  type PullOptions,
} from './delivery.js';
import { Directory } from './directory.js';
import { type FailureOptions, failureReporter, type ReportFailure } from './failures.js';
import { PresenceReporter } from './presence.js';
import { retryIdempotent } from './retry.js';
import { Rooms } from './rooms.js';
import { Tasks } from './tasks.js';
import { Tokens } from './tokens.js';
import { Tools } from './tools.js';
import { UsageReporter } from './usage.js';

/** One attach request's timeout, and how long an agent keeps trying to attach its inbox. */
const ATTACH_TIMEOUT_MS = 15_000;
const ATTACH_DEADLINE_MS = 120_000;

/** Options of {@link Agent.call}. */
export interface CallOptions {
  /** Milliseconds to wait. @default 5000 */
  timeout?: number;
}

/** Options of {@link connect}. */
export interface AgentOptions extends ConnectOptions, FailureOptions {
  /** How deliveries are handled; see {@link DeliveryOptions}. */
  delivery?: DeliveryOptions;
  /**
   * The OpenTelemetry tracer for this agent's spans (send, delivery, tool calls, API calls).
   * @default the globally registered provider's, which does nothing when no OTel SDK is set up
   */
  tracer?: Tracer;
}

/**
 * A connected participant (agent or human): everything it does on Parley goes through this handle.
 * Create it with {@link connect}; {@link Agent.close} drains it.
 */
export class Agent {
  /** The participant id (`agt_…` or `usr_…`). */
  readonly id: string;
  readonly #tracer: Tracer | undefined;
  /** The tracer of this agent's spans: the one given to {@link connect}, else the global one. */
  get tracer(): Tracer | undefined {
    return this.#tracer ?? defaultTracer();
  }
  /** The underlying NATS connection. */
  readonly nc: NatsConnection;
  /** Discovery, cards and the inventory (registry). */
  readonly directory: Directory;
  /** This participant's presence: `agent.presence.set('busy', 'reviewing PR 42')`. */
  readonly presence: PresenceReporter;
  /** Rooms: create, list, invite, and a handle per room to send and read history. */
  readonly rooms: Rooms;
  /** Authorized tool calls: `agent.tools.call(name, args, fn, { onBehalfOf })`. */
  readonly tools: Tools;
  /** Usage reports: `agent.usage.report({ model, inputTokens, outputTokens, costUsd })`. */
  readonly usage: UsageReporter;
  /** Delegation tokens: issue (people), exchange, revoke, read. */
  readonly tokens: Tokens;
  /** Contacts: ask for consent, answer, block, revoke, list. */
  readonly contacts: Contacts;
  /** Runtime bindings: attach a runtime's ids (LangGraph thread, a session) to a task, find them again. */
  readonly bindings: Bindings;
  /** Approvals: list, approve and deny tool calls held for a person's yes. */
  readonly approvals: Approvals;
  /** Tasks: delegate work with a deadline and a parent, move it through its states, compensate. */
  readonly tasks: Tasks;
  /** @internal replies of the send path */
  readonly replies: ReplyMux;
  /** @internal where failures nobody awaits go (`connect({ onError, logger })`) */
  readonly reportFailure: ReportFailure;
  readonly #deliveryOptions: DeliveryOptions;
  readonly #ownsConnection: boolean;
  #engine: DeliveryEngine | undefined;
  #listening: Promise<void> | undefined;

  /** @internal use {@link connect} or {@link attach} */
  constructor(
    nc: NatsConnection,
    id: string,
    options: { delivery?: DeliveryOptions; tracer?: Tracer; ownsConnection?: boolean } & FailureOptions = {},
  ) {
    this.nc = nc;
    this.id = id;
    this.#tracer = options.tracer;
    this.reportFailure = failureReporter(id, options);
    this.directory = new Directory(this);
    this.presence = new PresenceReporter(nc, id, this.reportFailure);
    this.rooms = new Rooms(this);
    this.tools = new Tools(this);
    this.usage = new UsageReporter(this);
    this.tokens = new Tokens(this, () => this.tools.invalidate());
    this.contacts = new Contacts(this);
    this.tasks = new Tasks(this);
    this.approvals = new Approvals(this);
    this.bindings = new Bindings(this);
    this.replies = new ReplyMux(nc, subjects.replyPrefix(id));
    this.#deliveryOptions = options.delivery ?? {};
    this.#ownsConnection = options.ownsConnection ?? true;
  }

  /** Calls an API method as this participant. Refusals throw a ParleyError with a code. */
  call<M extends ApiMethod>(
    method: M,
    body: ApiRequest<M>,
    options: CallOptions = {},
  ): Promise<ApiResponse<M>> {
    return request(this.nc, this.id, method, body, {
      ...options,
      ...(this.#tracer ? { tracer: this.#tracer } : {}),
    });
  }

  /** Who the registry says this participant is. */
  whoami(): Promise<WhoAmI> {
    return this.call(registryApi.whoami, {});
  }

  /**
   * Handles deliveries from this participant's inbox: `message` (what others send; own messages
   * only with `includeOwn`), `room_event` (joins, leaves, room changes), `dead_letter` (a message
   * this participant sent could not be handled by a recipient), `contact_request` (someone asks
   * this participant, or its agent, for contact: `delivery.contactRequest`), `contact_update` (a
   * request was answered or expired, a contact ended). The first call starts consuming;
   * the handler's promise is awaited before the message is acknowledged, and a throw means
   * "redeliver later" (in order). Await {@link Agent.listening} to know the consumer runs.
   */
  on(event: DeliveryEvent, handler: (delivery: Delivery) => unknown): this {
    if (this.#deliveryOptions.mode === 'pull') {
      throw new ParleyError(
        'INVALID_ARGUMENT',
        'this agent was connected with delivery mode "pull": use agent.pull(), not on()',
      );
    }
    this.#ensureEngine().on(event, handler);
    void this.listen().catch((err) => {
      this.#deliveryOptions.onError?.(err);
      this.reportFailure(err, 'delivery');
    });
    return this;
  }

  /**
   * Starts consuming the inbox without a handler: in pull mode, deliveries queue up from then on
   * (and `delivery.onQueued` sees each one). {@link Agent.on} and {@link Agent.pull} call it.
   */
  listen(): Promise<void> {
    this.#listening ??= this.#startEngine();
    return this.#listening;
  }

  /**
   * Pull mode (`connect({ delivery: { mode: 'pull' } })`): waits for deliveries and hands them out
   * in order, unacknowledged, as a batch; `batch.ack()` once they were passed on, `batch.release()`
   * to get them again on the next pull. See {@link PullBatch}.
   */
  async pull(options: PullOptions = {}): Promise<PullBatch> {
    if (this.#deliveryOptions.mode !== 'pull') {
      throw new ParleyError('INVALID_ARGUMENT', 'agent.pull() needs connect({ delivery: { mode: "pull" } })');
    }
    await this.listen();
    return this.#ensureEngine().pull(options);
  }

  /** Resolves once deliveries are being consumed (after the first {@link Agent.on}). */
  get listening(): Promise<void> {
    return this.#listening ?? Promise.resolve();
  }

  #ensureEngine(): DeliveryEngine {
    this.#engine ??= new Engine(
      this.id,
      { ...this.#deliveryOptions, tracer: this.tracer, onFailure: this.reportFailure },
      (room, after, before) => this.#backfill(room, after, before),
    );
    return this.#engine;
  }

  async #startEngine(): Promise<void> {
    // This connection's own deliver subject: once attached, it alone receives this participant's
    // deliveries (a second process of the same participant is refused with CONFLICT).
    const session = nuid.next();
    const jsm = await jetstreamManager(this.nc, { checkAPI: false });
    const attachInbox = (req: { session: string; resumeAfter?: number }) =>
      retryIdempotent(
        (left) =>
          this.call(roomsApi.attachInbox, req, {
            timeout: Math.max(1_000, Math.min(ATTACH_TIMEOUT_MS, left)),
          }),
        {
          deadlineMs: ATTACH_DEADLINE_MS,
          retryable: (err) =>
            isParleyError(err) && (err.code === 'DEADLINE_EXCEEDED' || err.code === 'UNAVAILABLE'),
        },
      );
    await this.#ensureEngine().start({
      nc: this.nc,
      deliverSubject: subjects.inboxDeliver(this.id, session),
      info: () => jsm.consumers.info(inboxStream(this.id), this.id),
      // Attaching is two JetStream API calls on the server: when thousands of agents connect at
      // once (a restart, pnpm bench:scale) they queue past one request's timeout, and right after a
      // nats-server restart the rooms service may not be back yet. Both calls are idempotent (the
      // same session again; a consumer already past the floor is left alone), so a timeout or an
      // unavailable service is tried again rather than leave this agent deaf.
      attach: async () => (await attachInbox({ session })).resumedAfter,
      resume: async (after) => (await attachInbox({ session, resumeAfter: after })).resumedAfter,
    });
  }

  /**
   * The room messages this participant should have received in (after, before). When the room log
   * no longer reaches back to `after` (retention), it reads what is retained and says where the
   * hole is.
   */
  async #backfill(room: string, after: number, before: number): Promise<Backfill> {
    const handle = this.rooms.room(room);
    const me = (await handle.get()).members.find((m) => m.id === this.id);
    const out: Backfill = { entries: [], through: 0 };
    let cursor = after;
    for (;;) {
      let page: Awaited<ReturnType<typeof handle.history>>;
      try {
        page = await handle.history({ order: 'oldest', after: cursor, before, limit: 200 });
      } catch (err) {
        const retainedFrom = Number((err as ParleyError).details?.retainedFrom);
        if (!isParleyError(err, 'HISTORY_EXPIRED') || out.gap || !(retainedFrom > cursor)) throw err;
        out.gap = { after, retainedFrom };
        if (retainedFrom >= before) return out;
        cursor = retainedFrom - 1;
        continue;
      }
      for (const e of page.entries) {
        cursor = e.seq;
        out.through = e.seq;
        const system =
          e.message.kind === 'membership' || e.message.kind === 'room' || e.message.kind === 'system';
        if (system || me?.delivery !== 'mentions' || e.message.mentions.includes(this.id))
          out.entries.push(e);
      }
      if (!page.more) return out;
    }
  }

  /**
   * Stops handling deliveries (running handlers finish and ack), then drains the connection (unless
   * the agent was {@link attach}ed to a connection it does not own).
   */
  async close(): Promise<void> {
    await this.presence.stop();
    this.tools.close();
    await this.#engine?.close();
    if (this.#ownsConnection) await drainConnection(this.nc);
    this.replies.close();
  }
}

/**
 * Acts as participant `id` over an existing connection whose credentials may speak for it — a
 * Parley service that serves participants (a gateway, the MCP bridge's HTTP endpoint). The NATS
 * server checks nothing about `id` here: only trusted service code may do this. `close()` leaves
 * the connection open.
 */
export function attach(
  nc: NatsConnection,
  id: string,
  options: { delivery?: DeliveryOptions } & FailureOptions = {},
): Agent {
  return new Agent(nc, id, { ...options, ownsConnection: false });
}

/**
 * Connects as the participant in `creds`. Without arguments: the local admin of the backbone `npm
 * start` runs (`PARLEY_HOME`, else `./.parley`), at the URL it runs on (`NATS_URL` overrides).
 */
export async function connect(options: AgentOptions = {}): Promise<Agent> {
  const { nc, identity } = await connectWithCreds(options);
  const agent = new Agent(nc, identity.id, {
    ...(options.delivery ? { delivery: options.delivery } : {}),
    ...(options.tracer ? { tracer: options.tracer } : {}),
    ...(options.onError ? { onError: options.onError } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
  });
  await agent.replies.start();
  if (options.presence !== false) await agent.presence.start(options.presence ?? {});
  return agent;
}
