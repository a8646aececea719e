/**
 * External A2A agents as Parley participants (runtime `a2a`), proxied by the gateway:
 *
 * - `a2a.importA2a` (`parley agent import-a2a`): fetches the card (the URL through the SSRF
 *   check of outbound webhooks), normalizes it with the SDK (v1.0 and v0.3 cards), checks its JWS
 *   signatures when it carries any (keys from the signature's `jku`), registers an agent of runtime
 *   `a2a` for the owner with the caller's own rights, and keeps the record in `parley_gateway`
 *   (`a2a.remote.<agentId>`).
 * - For every record (watched, so every replica sees imports at once) a proxy acts as that agent on
 *   its own pooled connection: a room message to it (mentioning it, or in a direct room) becomes an
 *   A2A `message/send` (`message/stream` when the card says streaming) with the Parley message id as
 *   the A2A message id (a retry is the same message), the recent room history it may read as a data
 *   part, and the message's W3C trace context as `traceparent`. What comes back goes into the room
 *   as that agent: working status updates as `status` messages, artifacts and the final message as
 *   replies, `input-required` as a reply that mentions the room's humans (like ask_human). A
 *   `task.update` with metadata `a2a.state = canceled` replying to the request sends `tasks/cancel`.
 * - Unreachable (network errors after retries with backoff): the message is released to be handled
 *   again later (never lost) and the agent's presence goes offline until a call succeeds.
 */
import { createHash } from 'node:crypto';
import type { AgentCard as A2aCard, Part as A2aPart, Message, StreamResponse } from '@a2a-js/sdk';
import { Role, TaskState, verifyAgentCardSignature } from '@a2a-js/sdk';
import {
  type Client,
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
} from '@a2a-js/sdk/client';
import { jetstream } from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import {
  A2A_DELEGATION_EXTENSION,
  A2A_DELEGATION_HEADER,
  A2aRemoteRecord,
  A2aRemoteRun,
  type AgentCardInput,
  a2aApi,
  buckets,
  governanceApi,
  ParleyError,
  type PrincipalId,
  registryApi,
  request,
  serviceId,
} from '@parley/contracts';
import {
  appendAudit,
  bind,
  createMicroService,
  type Logger,
  packageVersion,
  serveApis,
  watchKv,
} from '@parley/kit';
import type { PulledDelivery } from '@parley/sdk';
import { createLocalJWKSet, type JWK } from 'jose';
import type { GatewayService } from '../service.js';
import { A2A_META, partsFromA2a, partsToA2a } from './executor.js';
import { checkOutboundUrl } from './store.js';

/** KV key of an imported agent. */
export const remoteKey = (agent: string) => `a2a.remote.${agent}`;
const remoteContextKey = (agent: string, room: string) => `a2a.rctx.${agent}.${room}`;
/** A streaming call in progress (A2aRemoteRun) and the lease of the replica streaming it. */
const remoteRunKey = (agent: string, message: string) => `a2a.rrun.${agent}.${message}`;
const remoteRunLease = (agent: string, message: string) => `gateway-a2a-run.${agent}.${message}`;
const SELF = serviceId('gateway');
const HISTORY_CONTEXT = 20;
const RETRIES = 4;

/**
 * The bearer secret a `bearer:<ref>` names: env PARLEY_A2A_SECRET_<REF>. Read from the environment
 * at call time rather than config.ts: the names are chosen per import, and a rotated secret takes
 * effect without a restart of the import.
 */
export function secretOf(auth: string | undefined, env: Record<string, string | undefined> = process.env) {
  if (!auth) return undefined;
  const ref = auth.slice('bearer:'.length).toUpperCase().replaceAll(/[-.]/g, '_');
  const secret = env[`PARLEY_A2A_SECRET_${ref}`];
  if (!secret) throw new ParleyError('INVALID_ARGUMENT', `the gateway has no PARLEY_A2A_SECRET_${ref}`);
  return secret;
}

/** Fetches, normalizes and (when signed) verifies a card. */
async function fetchCard(
  cardUrl: string,
  allowed: ReadonlySet<string>,
  fetchImpl: typeof fetch,
): Promise<{ card: A2aCard; signed: boolean }> {
  await checkOutboundUrl(cardUrl, allowed);
  let card: A2aCard;
  try {
    card = await new DefaultAgentCardResolver({ fetchImpl, legacyCompat: { enabled: true } }).resolve(
      cardUrl,
      '',
    );
  } catch (err) {
    throw new ParleyError(
      'INVALID_ARGUMENT',
      `could not fetch an A2A agent card from ${cardUrl}: ${(err as Error).message}`,
    );
  }
  if (!card.name || !card.supportedInterfaces?.some((i) => i.protocolBinding === 'JSONRPC')) {
    throw new ParleyError('INVALID_ARGUMENT', 'the A2A agent card has no name or no JSON-RPC interface');
  }
  if (!card.signatures?.length) return { card, signed: false };
  const verify = verifyAgentCardSignature(async (kid, jku) => {
    if (!jku) throw new Error('the signature names no jku to fetch its key from');
    await checkOutboundUrl(jku, allowed);
    const jwks = (await (await fetchImpl(jku)).json()) as { keys: JWK[] };
    return (await createLocalJWKSet(jwks)({
      alg: jwks.keys.find((k) => k.kid === kid)?.alg ?? 'ES256',
      kid,
    })) as never;
  });
  try {
    await verify(card);
  } catch (err) {
    throw new ParleyError(
      'INVALID_ARGUMENT',
      `the A2A agent card's signature does not verify: ${(err as Error).message}`,
    );
  }
  return { card, signed: true };
}

/** A Parley card for an A2A card. */
function parleyCardOf(card: A2aCard): AgentCardInput {
  const name =
    card.name
      .replaceAll(/[^\p{L}\p{N} ._-]/gu, ' ')
      .trim()
      .slice(0, 80) || 'a2a agent';
  return {
    name: /^[\p{L}\p{N}]/u.test(name) ? name : `a2a ${name}`,
    description: (card.description ?? '').slice(0, 2000),
    version: (card.version || '0.1.0').slice(0, 50),
    ...(card.provider?.organization
      ? { provider: { organization: card.provider.organization.slice(0, 200) } }
      : {}),
    skills: (card.skills ?? []).slice(0, 50).map((s, i) => ({
      id: (
        String(s.id ?? '')
          .toLowerCase()
          .replaceAll(/[^a-z0-9._-]/g, '-')
          .replace(/^[^a-z0-9]+/, '') || `skill-${i}`
      ).slice(0, 100),
      name: (s.name || s.id || `skill ${i}`).slice(0, 200),
      description: (s.description ?? '').slice(0, 2000),
      tags: (s.tags ?? []).filter((t) => t.length > 0 && t.length <= 50).slice(0, 20),
      examples: (s.examples ?? []).filter((e) => e.length <= 500).slice(0, 10),
    })),
    capabilities: { streaming: card.capabilities?.streaming === true, pushNotifications: false },
    defaultInputModes: (card.defaultInputModes ?? []).slice(0, 20),
    defaultOutputModes: (card.defaultOutputModes ?? []).slice(0, 20),
    runtime: 'a2a',
    visibility: 'org',
  };
}

/** Starts the import API and the proxies; resolves with a stop function. */
export async function startRemoteA2a(service: GatewayService, log: Logger): Promise<() => Promise<void>> {
  const allowed = new Set(
    service.config.PARLEY_WEBHOOK_ALLOW_PRIVATE.split(',')
      .map((s) => s.trim().toLowerCase())
      .filter(Boolean),
  );
  const kv: KV = service.kv();
  const proxies = new Map<string, Proxy>();
  const leases = await new Kvm(service.nc).open(buckets.leases);
  const deps: ProxyDeps = {
    service,
    log,
    leases,
    leaseTtlMs: Math.max(1000, (await leases.status()).ttl || 6000),
    replica: `gw-${process.pid}-${Math.random().toString(36).slice(2, 8)}`,
  };
  // Answered on the gateway's responder connection, with the gateway's standing view (a suspended
  // participant cannot import agents), like every other API the gateway serves.
  const micro = createMicroService(service.responder, {
    name: 'parley-gateway-a2a',
    version: packageVersion(import.meta.url),
    description: 'The gateway: A2A agents imported as participants.',
  });
  serveApis(
    micro,
    [
      bind(a2aApi.importA2a, async (req, ctx) => {
        const { card, signed } = await fetchCard(req.cardUrl, allowed, fetch);
        const endpoint =
          card.supportedInterfaces.find(
            (i) => i.protocolBinding === 'JSONRPC' && i.protocolVersion.startsWith('1'),
          ) ?? card.supportedInterfaces.find((i) => i.protocolBinding === 'JSONRPC');
        if (!endpoint)
          throw new ParleyError('INVALID_ARGUMENT', 'the A2A agent card has no JSON-RPC interface');
        await checkOutboundUrl(endpoint.url, allowed);
        if (req.auth) secretOf(req.auth);
        // Registered with the caller's own rights: the registry decides whether it may own one for `owner`.
        const held = await service.pool.acquire(ctx.caller);
        let agentId: string;
        try {
          agentId = (
            await held.agent.call(registryApi.createAgent, {
              owner: req.owner,
              card: parleyCardOf(card) as never,
            })
          ).agent.id;
        } finally {
          held.release();
        }
        const record = A2aRemoteRecord.parse({
          agent: agentId,
          cardUrl: req.cardUrl,
          card: JSON.parse(JSON.stringify(card)),
          url: endpoint.url,
          protocolVersion: endpoint.protocolVersion || '1.0',
          streaming: card.capabilities?.streaming === true,
          signed,
          ...(req.auth ? { auth: req.auth } : {}),
          importedBy: ctx.caller,
          importedAt: new Date().toISOString(),
        });
        await kv.put(remoteKey(agentId), JSON.stringify(record));
        await appendAudit(jetstream(service.nc), {
          domain: 'credentials',
          action: 'a2a.import',
          actor: ctx.caller as PrincipalId,
          target: agentId,
          data: { cardUrl: req.cardUrl, signed },
        });
        return { agent: agentId as never, name: card.name, streaming: record.streaming, signed };
      }),
    ],
    { service: 'a2a', queue: 'a2a', log, standing: service.standing() },
  );
  if (!service.config.PARLEY_A2A_OUTBOUND) {
    log.info('A2A proxies of imported agents run on other replicas (PARLEY_A2A_OUTBOUND=false)');
    return () => micro.stop();
  }
  const watch = await watchKv(kv, {
    key: 'a2a.remote.*',
    onEntry: (e) => {
      const id = e.key.slice('a2a.remote.'.length);
      proxies.get(id)?.stop();
      proxies.delete(id);
      if (e.operation === 'PUT') proxies.set(id, startProxy(deps, A2aRemoteRecord.parse(e.json())));
    },
    onError: (err) => log.warn({ err }, 'A2A remote watch failed'),
  });
  await watch.initialized;
  // Streaming calls in progress, kept by one watch: a snapshot per scan made a new consumer on the
  // server every few seconds, each lingering 5 min (`pnpm soak` found ~100 on an idle gateway).
  const runs = new Map<string, A2aRemoteRun>();
  const runWatch = await watchKv(kv, {
    key: 'a2a.rrun.>',
    onEntry: (e) => {
      const run = e.operation === 'PUT' ? A2aRemoteRun.safeParse(e.json()) : undefined;
      if (run?.success) runs.set(e.key, run.data);
      else runs.delete(e.key);
    },
    onError: (err) => log.warn({ err }, 'A2A run watch failed'),
  });
  await runWatch.initialized;
  // Streaming calls whose replica died: resumed by whichever replica takes the lapsed lease first.
  const scan = () => {
    for (const run of runs.values()) proxies.get(run.agent)?.resume(run);
  };
  const scanner = setInterval(scan, deps.leaseTtlMs / 2);
  scanner.unref();
  scan();
  return async () => {
    clearInterval(scanner);
    runWatch.stop();
    watch.stop();
    for (const p of proxies.values()) p.stop();
    await micro.stop();
  };
}

/** What the proxies share. */
interface ProxyDeps {
  service: GatewayService;
  log: Logger;
  /** `parley_leases`: who streams a remote task right now. */
  leases: KV;
  leaseTtlMs: number;
  replica: string;
}

/** One imported agent's proxy. */
interface Proxy {
  stop(): void;
  /** Carries on a streaming call whose replica died (when no live replica holds its lease). */
  resume(run: A2aRemoteRun): void;
}

type Held = Awaited<ReturnType<GatewayService['pool']['acquire']>>;
type RoomHandle = ReturnType<Held['agent']['rooms']['room']>;
type Waiting = { taskId: string; contextId: string };

const sha = (s: string) => createHash('sha256').update(s).digest('hex');
const TERMINAL = new Set<TaskState>([
  TaskState.TASK_STATE_COMPLETED,
  TaskState.TASK_STATE_FAILED,
  TaskState.TASK_STATE_CANCELED,
  TaskState.TASK_STATE_REJECTED,
]);

const isNetwork = (err: unknown) =>
  err instanceof TypeError ||
  /fetch failed|ECONNREFUSED|ECONNRESET|socket|network|terminated/i.test(String((err as Error)?.message));

/** The proxy of one imported agent. */
function startProxy(deps: ProxyDeps, record: A2aRemoteRecord): Proxy {
  const { service, log } = deps;
  const me = record.agent;
  const stop = new AbortController();
  // Parley request message id → the remote task (for cancel) and rooms waiting on input.
  const remoteTasks = new Map<string, Waiting>();
  const inputRequired = new Map<string, Waiting>();
  const resuming = new Set<string>();
  let online = false;

  /** A lease while this replica streams a remote task; undefined when another replica holds it. */
  async function holdLease(key: string): Promise<{ end(): Promise<void> } | undefined> {
    let revision: number;
    try {
      revision = await deps.leases.create(key, deps.replica);
    } catch {
      return undefined;
    }
    const renew = setInterval(() => {
      deps.leases.update(key, deps.replica, revision).then(
        (r) => {
          revision = r;
        },
        (err: unknown) => log.warn({ err, key }, 'A2A run lease not renewed'),
      );
    }, deps.leaseTtlMs / 3);
    renew.unref();
    return {
      async end() {
        clearInterval(renew);
        await deps.leases.delete(key, { previousSeq: revision }).catch(() => undefined);
      },
    };
  }

  /** The signed delegation token of one call (governance mints it; aud = the card URL). */
  const callToken = async (o: {
    sender: string;
    room: string;
    messageId: string;
    taskId?: string | undefined;
    tokenId?: string | undefined;
  }) =>
    (
      await request(service.nc, SELF, governanceApi.mintA2aCallToken, {
        actor: me as never,
        sender: o.sender as never,
        audience: record.cardUrl,
        room: o.room as never,
        messageId: o.messageId as never,
        ...(o.taskId ? { taskId: o.taskId } : {}),
        ...(o.tokenId ? { tokenId: o.tokenId as never } : {}),
      })
    ).token;

  /** The delegation a message carries, when the A2A agent may act under it (its actor sent it, or it was handed to the agent). */
  const tokenIdOf = (m: PulledDelivery['message']) => {
    const o = m.onBehalfOf;
    const last = o?.chain[o.chain.length - 1];
    return o && (last === m.sender.id || last === me) ? o.tokenId : undefined;
  };

  const clientFor = (traceparent: string | undefined, delegation: string): Promise<Client> => {
    const secret = secretOf(record.auth);
    const fetchImpl: typeof fetch = (input, init) => {
      const headers = new Headers(init?.headers);
      if (secret) headers.set('authorization', `Bearer ${secret}`);
      if (traceparent) headers.set('traceparent', traceparent);
      // Identity stays out of the payload (A2A): the token is a header of the extension it belongs to.
      headers.set(A2A_DELEGATION_HEADER, delegation);
      for (const h of ['A2A-Extensions', 'X-A2A-Extensions']) {
        const listed = headers.get(h);
        headers.set(h, listed ? `${listed}, ${A2A_DELEGATION_EXTENSION}` : A2A_DELEGATION_EXTENSION);
      }
      return fetch(input, { ...init, headers });
    };
    const card = A2aRemoteRecord.shape.card.parse(record.card) as unknown as A2aCard;
    return new ClientFactory(
      ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
        transports: [new JsonRpcTransportFactory({ fetchImpl, legacyCompat: { enabled: true } })],
      }),
    ).createFromAgentCard({
      ...card,
      supportedInterfaces: card.supportedInterfaces.filter(
        (i) => i.url === record.url && i.protocolBinding === 'JSONRPC',
      ),
    });
  };

  /**
   * What the remote events say, into the room as this agent: each event once. An event's key
   * (artifact id, status state + timestamp, message id) goes into `posted` once it is in the room;
   * a resumed stream (whose first event is the task snapshot) skips what is there already, and the
   * room message's client id is derived from the key, so a send repeated after a crash is the same
   * message. Says whether the task ended, waits for input, or goes on.
   */
  function emitter(o: {
    room: RoomHandle;
    roomId: string;
    requestId: string;
    humans: readonly string[];
    waiting?: Waiting | undefined;
    posted: Set<string>;
    /** Called with every task-bearing event before anything is posted (the run record). */
    onTask(taskId: string, contextId: string): Promise<void>;
    persist(): Promise<void>;
    accepted(): void;
  }) {
    const ctxKey = remoteContextKey(me, o.roomId);
    let knownContext: string | undefined;
    const remember = async (contextId: string) => {
      if (!contextId || contextId === knownContext) return;
      const stored = await service.kv().get(ctxKey);
      if (stored?.operation !== 'PUT' || stored.string() !== contextId)
        await service.kv().put(ctxKey, contextId);
      knownContext = contextId;
    };
    const post = async (
      key: string,
      parts: readonly A2aPart[],
      kind: 'message' | 'status',
      taskId?: string,
      x: { state?: string; mentions?: readonly string[] } = {},
    ) => {
      if (o.posted.has(key)) return;
      const converted = partsFromA2a(parts);
      if (converted.length) {
        await o.room.send(converted, {
          kind,
          replyTo: o.requestId,
          delegation: null,
          // The same event is the same room message, also when a resumed stream sends it again.
          clientMsgId: `a2a-${sha(`${o.requestId} ${key}`).slice(0, 40)}`,
          ...(x.mentions?.length ? { mentions: [...x.mentions] } : {}),
          metadata: {
            ...(taskId ? { [A2A_META.task]: taskId } : {}),
            ...(x.state ? { [A2A_META.state]: x.state } : {}),
          },
        });
      }
      o.posted.add(key);
      await o.persist();
    };
    return async (
      e: StreamResponse['payload'],
    ): Promise<'ended' | 'input-required' | 'continued' | 'going'> => {
      if (!e) return 'going';
      if (e.$case === 'message') {
        o.accepted();
        await remember(e.value.contextId);
        await post(`m:${e.value.messageId}`, e.value.parts, 'message');
        return 'ended';
      }
      const taskId = e.$case === 'task' ? e.value.id : e.value.taskId;
      const contextId = e.value.contextId;
      // Recorded before the inbox moves on, so a crash from here on can be resumed.
      await o.onTask(taskId, contextId);
      o.accepted();
      await remember(contextId);
      remoteTasks.set(o.requestId, { taskId, contextId });
      if (e.$case === 'artifactUpdate') {
        const a = e.value.artifact;
        if (a?.parts.length) {
          const key = e.value.append
            ? `a:${a.artifactId}:${sha(JSON.stringify(a.parts)).slice(0, 16)}`
            : `a:${a.artifactId}`;
          await post(key, a.parts, 'message', taskId);
        }
        return 'going';
      }
      if (e.$case === 'task') {
        for (const a of e.value.artifacts) await post(`a:${a.artifactId}`, a.parts, 'message', taskId);
      }
      const status = e.value.status;
      const state = status?.state ?? TaskState.TASK_STATE_UNSPECIFIED;
      const parts = status?.message?.parts ?? [];
      const key = `s:${state}:${status?.timestamp ?? ''}:${status?.message?.messageId ?? ''}`;
      if (state === TaskState.TASK_STATE_INPUT_REQUIRED) {
        // The snapshot a continued task starts with still shows the question being answered.
        if (e.$case === 'task' && o.waiting?.taskId === taskId) return 'continued';
        inputRequired.set(o.roomId, { taskId, contextId });
        await post(
          key,
          parts.length ? parts : partsToA2a([{ type: 'text', text: 'input required' }]),
          'message',
          taskId,
          { state: 'input-required', mentions: o.humans },
        );
        return 'input-required';
      }
      if (o.waiting && inputRequired.get(o.roomId)?.taskId === o.waiting.taskId)
        inputRequired.delete(o.roomId);
      if (state === TaskState.TASK_STATE_WORKING || state === TaskState.TASK_STATE_SUBMITTED) {
        if (parts.length) await post(key, parts, 'status', taskId);
      } else if (state === TaskState.TASK_STATE_COMPLETED) {
        if (parts.length && e.$case !== 'task') await post(key, parts, 'message', taskId);
      } else if (state !== TaskState.TASK_STATE_UNSPECIFIED) {
        const name = TaskState[state]?.replace('TASK_STATE_', '').toLowerCase() ?? 'ended';
        await post(
          key,
          parts.length ? parts : partsToA2a([{ type: 'text', text: `task ${name}` }]),
          'status',
          taskId,
          { state: name },
        );
      }
      return TERMINAL.has(state) ? 'ended' : 'going';
    };
  }

  /** A run record kept while a streaming call goes on (see A2aRemoteRun). */
  function runKeeper(base: Omit<A2aRemoteRun, 'taskId' | 'contextId' | 'posted'>, posted: Set<string>) {
    let run: A2aRemoteRun | undefined;
    let lease: { end(): Promise<void> } | undefined;
    const key = remoteRunKey(me, base.messageId);
    return {
      async start(taskId: string, contextId: string) {
        if (run) return;
        run = A2aRemoteRun.parse({ ...base, taskId, contextId, posted: [...posted] });
        lease = await holdLease(remoteRunLease(me, base.messageId));
        await service.kv().put(key, JSON.stringify(run));
      },
      async persist() {
        if (run) await service.kv().put(key, JSON.stringify({ ...run, posted: [...posted] }));
      },
      get active() {
        return run !== undefined;
      },
      /** Ends the run: forgotten when it finished, else left (its lease let go) for a replica to resume. */
      async end(finished: boolean) {
        if (!run) return;
        if (finished)
          await service
            .kv()
            .delete(key)
            .catch(() => undefined);
        await lease?.end();
      },
    };
  }

  /**
   * Handles one delivery; `accepted` is called once the remote agent has the request (its first
   * event), so the inbox can move on while a long task streams.
   */
  async function handle(agent: Held['agent'], d: PulledDelivery, accepted: () => void) {
    const m = d.message;
    if (d.event !== 'message' || m.sender.id === me) return;
    const room = agent.rooms.room(d.room);
    if (m.kind === 'task.update') {
      const target = m.replyTo ? await taskOfRequest(m.replyTo) : undefined;
      if (m.metadata?.[A2A_META.state] === 'canceled' && target) {
        const client = await clientFor(
          m.trace?.traceparent,
          await callToken({
            sender: m.sender.id,
            room: d.room,
            messageId: m.id,
            taskId: target.taskId,
            tokenId: tokenIdOf(m),
          }),
        );
        const task = await client.cancelTask({ tenant: '', id: target.taskId, metadata: undefined });
        await room.send(`canceled (${TaskState[task.status?.state ?? 0] ?? 'unknown'})`, {
          kind: 'status',
          replyTo: m.replyTo as string,
          delegation: null,
          metadata: { [A2A_META.task]: target.taskId, [A2A_META.state]: 'canceled' },
        });
      }
      return;
    }
    if (m.kind !== 'message' && m.kind !== 'handoff') return;
    const info = await room.get();
    if (!m.mentions.includes(me) && !info.direct) return;
    const history = await room.history({ order: 'newest', limit: HISTORY_CONTEXT });
    const context = history.entries
      .filter((e) => e.message.id !== m.id && (e.message.kind === 'message' || e.message.kind === 'handoff'))
      .reverse()
      .map((e) => ({
        from: e.message.sender.id,
        sentAt: e.message.sentAt,
        text: e.message.parts.map((p) => (p.type === 'text' ? p.text : '')).join(''),
      }));
    const storedCtx = await service.kv().get(remoteContextKey(me, d.room));
    const waiting = inputRequired.get(d.room);
    const message: Message = {
      messageId: m.id,
      contextId: waiting?.contextId ?? (storedCtx?.operation === 'PUT' ? storedCtx.string() : ''),
      taskId: waiting?.taskId ?? '',
      role: Role.ROLE_USER,
      parts: [
        ...partsToA2a(m.parts),
        ...(context.length
          ? partsToA2a([
              { type: 'data', data: { parleyRoomHistory: context }, mediaType: 'application/json' },
            ])
          : []),
      ],
      metadata: {
        parleyRoom: d.room,
        parleySender: m.sender.id,
        // The verified on-behalf-of chain (principal, actors, scopes, token id) as the rooms ingress
        // stamped it, for display; the signed form is the Parley-Delegation header.
        ...(m.onBehalfOf ? { parleyOnBehalfOf: { ...m.onBehalfOf, token: undefined } } : {}),
      },
      extensions: [A2A_DELEGATION_EXTENSION],
      referenceTaskIds: [],
    };
    const humans = info.members.map((x) => x.id).filter((id) => id.startsWith('usr_'));
    const tokenId = tokenIdOf(m);
    const client = await clientFor(
      m.trace?.traceparent,
      await callToken({
        sender: m.sender.id,
        room: d.room,
        messageId: m.id,
        taskId: waiting?.taskId,
        tokenId,
      }),
    );
    const posted = new Set<string>();
    const run = runKeeper(
      {
        agent: me as never,
        room: d.room as never,
        messageId: m.id as never,
        sender: m.sender.id as never,
        ...(tokenId ? { tokenId: tokenId as never } : {}),
        ...(m.trace?.traceparent ? { traceparent: m.trace.traceparent } : {}),
        humans: humans as never,
        startedAt: new Date().toISOString(),
      },
      posted,
    );
    const emit = emitter({
      room,
      roomId: d.room,
      requestId: m.id,
      humans,
      waiting,
      posted,
      onTask: (taskId, contextId) => (record.streaming ? run.start(taskId, contextId) : Promise.resolve()),
      persist: () => run.persist(),
      accepted,
    });
    const params = { tenant: '', message, configuration: undefined, metadata: undefined };
    if (!record.streaming) {
      const result = await client.sendMessage(params);
      if ('status' in result) await emit({ $case: 'task', value: result });
      else await emit({ $case: 'message', value: result });
      return;
    }
    let finished = false;
    try {
      for await (const e of client.sendMessageStream(params)) if ((await emit(e.payload)) === 'ended') break;
      finished = true;
    } catch (err) {
      // The remote has the task and the stream broke: the run record stays for a resume.
      if (!run.active) throw err;
      log.warn({ err, agent: me, message: m.id }, 'A2A stream broke; the task will be resumed');
    } finally {
      await run.end(finished);
    }
  }

  /** The remote task a room request started (this replica's memory, else a run record). */
  async function taskOfRequest(requestId: string): Promise<Waiting | undefined> {
    const known = remoteTasks.get(requestId);
    if (known) return known;
    const e = await service.kv().get(remoteRunKey(me, requestId));
    if (e?.operation !== 'PUT') return undefined;
    const run = A2aRemoteRun.parse(e.json());
    return { taskId: run.taskId, contextId: run.contextId };
  }

  /** Resubscribes to the remote task of a run whose replica died, and carries what is left into the room. */
  async function resume(run: A2aRemoteRun) {
    if (resuming.has(run.messageId) || stop.signal.aborted) return;
    resuming.add(run.messageId);
    const lease = await holdLease(remoteRunLease(me, run.messageId));
    if (!lease) {
      resuming.delete(run.messageId);
      return;
    }
    let finished = false;
    let held: Held | undefined;
    try {
      held = await service.pool.acquire(me);
      const posted = new Set<string>(run.posted);
      remoteTasks.set(run.messageId, { taskId: run.taskId, contextId: run.contextId });
      const emit = emitter({
        room: held.agent.rooms.room(run.room),
        roomId: run.room,
        requestId: run.messageId,
        humans: run.humans,
        posted,
        onTask: async () => undefined,
        persist: async () => {
          await service
            .kv()
            .put(remoteRunKey(me, run.messageId), JSON.stringify({ ...run, posted: [...posted] }));
        },
        accepted: () => undefined,
      });
      const client = await clientFor(
        run.traceparent,
        await callToken({
          sender: run.sender,
          room: run.room,
          messageId: run.messageId,
          taskId: run.taskId,
          tokenId: run.tokenId,
        }),
      );
      log.info({ agent: me, task: run.taskId, message: run.messageId }, 'resuming an A2A stream');
      try {
        // Until it ends or waits for input (a resubscribed stream stays open while the task waits).
        for await (const e of client.resubscribeTask({ tenant: '', id: run.taskId })) {
          const said = await emit(e.payload);
          if (said === 'ended' || said === 'input-required') break;
        }
      } catch (err) {
        if (isNetwork(err)) throw err;
        // A task that ended while nobody listened cannot be subscribed to: its end is in tasks/get.
        const task = await client.getTask({ tenant: '', id: run.taskId, historyLength: 0 });
        await emit({ $case: 'task', value: task });
      }
      finished = true;
    } catch (err) {
      log.warn({ err, agent: me, task: run.taskId }, 'A2A resume failed; tried again later');
    } finally {
      held?.release();
      if (finished)
        await service
          .kv()
          .delete(remoteRunKey(me, run.messageId))
          .catch(() => undefined);
      await lease.end();
      resuming.delete(run.messageId);
    }
  }

  void (async () => {
    let backoff = 500;
    while (!stop.signal.aborted) {
      let held: Held | undefined;
      try {
        held = await service.pool.acquire(me);
        while (!stop.signal.aborted) {
          const batch = await held.agent.pull({ max: 1, signal: stop.signal });
          const d = batch.deliveries[0];
          if (!d) continue;
          const agent = held.agent;
          let accept!: () => void;
          const accepted = new Promise<'accepted'>((r) => {
            accept = () => r('accepted');
          });
          let isAccepted = false;
          void accepted.then(() => {
            isAccepted = true;
          });
          const outcome = (async (): Promise<{ ok: boolean; err?: unknown }> => {
            let lastErr: unknown;
            for (let attempt = 0; attempt < RETRIES; attempt++) {
              try {
                await handle(agent, d, accept);
                return { ok: true };
              } catch (err) {
                lastErr = err;
                // Once the remote has the task, a retry would be a second request: no retry.
                if (isAccepted || !isNetwork(err)) break;
                await new Promise((r) => setTimeout(r, 200 * 2 ** attempt));
              }
            }
            return { ok: false, err: lastErr };
          })();
          const refused = async (err: unknown) => {
            log.info({ err, agent: me }, 'A2A call failed');
            await agent.rooms
              .room(d.room)
              .send(`A2A call failed: ${(err as Error)?.message ?? String(err)}`.slice(0, 2000), {
                kind: 'status',
                replyTo: d.message.id,
                delegation: null,
              })
              .catch(() => undefined);
          };
          const first = await Promise.race([accepted, outcome]);
          const result = first === 'accepted' ? { ok: true } : first;
          if (result.ok) {
            if (!online) {
              online = true;
              // Heartbeats while reachable, so that stop() below says offline at once.
              await agent.presence.start().catch(() => undefined);
              await agent.presence.set('online', 'A2A agent').catch(() => undefined);
            }
            await batch.ack();
            backoff = 500;
            // The rest of a streaming task goes on without holding the inbox.
            if (first === 'accepted') void outcome.then((o) => (o.ok ? undefined : refused(o.err)));
          } else if (isNetwork(result.err)) {
            // Unreachable: offline, and the message comes again later (released, not lost).
            online = false;
            await agent.presence.stop().catch(() => undefined);
            batch.release();
            log.warn({ err: result.err, agent: me }, 'A2A agent unreachable');
            await new Promise((r) => setTimeout(r, backoff));
            backoff = Math.min(backoff * 2, 30_000);
          } else {
            // The remote refused it: said in the room, once.
            await refused(result.err);
            await batch.ack();
          }
        }
      } catch (err) {
        if (!stop.signal.aborted) {
          log.warn({ err, agent: me }, 'A2A proxy restarts');
          await new Promise((r) => setTimeout(r, backoff));
        }
      } finally {
        held?.release();
      }
    }
  })();
  return { stop: () => stop.abort(), resume: (run) => void resume(run) };
}
