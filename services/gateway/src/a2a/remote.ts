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
  A2aRemoteRecord,
  type AgentCardInput,
  a2aApi,
  buckets,
  ParleyError,
  type PrincipalId,
  registryApi,
} from '@parley/contracts';
import {
  appendAudit,
  bind,
  createMicroService,
  createStandingView,
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
  const proxies = new Map<string, { stop(): void }>();
  // Standing for serveApis: a suspended participant cannot import agents.
  const standing = await createStandingView(await new Kvm(service.nc).open(buckets.policy), { log });
  const micro = createMicroService(service.nc, {
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
    { service: 'a2a', queue: 'a2a', log, standing },
  );
  const watch = await watchKv(kv, {
    key: 'a2a.remote.*',
    onEntry: (e) => {
      const id = e.key.slice('a2a.remote.'.length);
      proxies.get(id)?.stop();
      proxies.delete(id);
      if (e.operation === 'PUT') proxies.set(id, startProxy(service, A2aRemoteRecord.parse(e.json()), log));
    },
    onError: (err) => log.warn({ err }, 'A2A remote watch failed'),
  });
  await watch.initialized;
  return async () => {
    watch.stop();
    standing.stop();
    for (const p of proxies.values()) p.stop();
    await micro.stop();
  };
}

/** The proxy of one imported agent. */
function startProxy(service: GatewayService, record: A2aRemoteRecord, log: Logger): { stop(): void } {
  const me = record.agent;
  const stop = new AbortController();
  // Parley request message id → the remote task (for cancel) and rooms waiting on input.
  const remoteTasks = new Map<string, { taskId: string; contextId: string }>();
  const inputRequired = new Map<string, { taskId: string; contextId: string }>();
  let online = false;

  const clientFor = (traceparent?: string): Promise<Client> => {
    const secret = secretOf(record.auth);
    const fetchImpl: typeof fetch = (input, init) => {
      const headers = new Headers(init?.headers);
      if (secret) headers.set('authorization', `Bearer ${secret}`);
      if (traceparent) headers.set('traceparent', traceparent);
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
   * Handles one delivery; `accepted` is called once the remote agent has the request (its first
   * event), so the inbox can move on while a long task streams.
   */
  async function handle(
    agent: Awaited<ReturnType<GatewayService['pool']['acquire']>>['agent'],
    d: PulledDelivery,
    accepted: () => void,
  ) {
    const m = d.message;
    if (d.event !== 'message' || m.sender.id === me) return;
    const room = agent.rooms.room(d.room);
    if (m.kind === 'task.update') {
      const target = m.replyTo ? remoteTasks.get(m.replyTo) : undefined;
      if (m.metadata?.[A2A_META.state] === 'canceled' && target) {
        const client = await clientFor(m.trace?.traceparent);
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
    const ctxKey = remoteContextKey(me, d.room);
    const storedCtx = await service.kv().get(ctxKey);
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
        // The verified on-behalf-of chain (principal, actors, scopes, token id) as the rooms ingress stamped it.
        ...(m.onBehalfOf ? { parleyOnBehalfOf: m.onBehalfOf } : {}),
      },
      extensions: [],
      referenceTaskIds: [],
    };
    const humans = info.members.map((x) => x.id).filter((id) => id.startsWith('usr_'));
    const client = await clientFor(m.trace?.traceparent);
    const emit = async (e: StreamResponse['payload']) => {
      if (!e) return;
      accepted();
      if (e.$case === 'message') {
        await remember(e.value.contextId);
        await reply(e.value.parts, 'message');
        return;
      }
      const taskId = e.$case === 'task' ? e.value.id : e.value.taskId;
      const contextId = e.value.contextId;
      await remember(contextId);
      remoteTasks.set(m.id, { taskId, contextId });
      if (e.$case === 'artifactUpdate') {
        if (e.value.artifact?.parts.length) await reply(e.value.artifact.parts, 'message', taskId);
        return;
      }
      const status = e.$case === 'task' ? e.value.status : e.value.status;
      if (e.$case === 'task') {
        for (const a of e.value.artifacts) await reply(a.parts, 'message', taskId);
      }
      const state = status?.state ?? TaskState.TASK_STATE_UNSPECIFIED;
      const parts = status?.message?.parts ?? [];
      if (state === TaskState.TASK_STATE_INPUT_REQUIRED) {
        inputRequired.set(d.room, { taskId, contextId });
        await reply(
          parts.length ? parts : partsToA2a([{ type: 'text', text: 'input required' }]),
          'message',
          taskId,
          {
            state: 'input-required',
            mentions: humans,
          },
        );
        return;
      }
      if (waiting && inputRequired.get(d.room)?.taskId === waiting.taskId) inputRequired.delete(d.room);
      if (state === TaskState.TASK_STATE_WORKING || state === TaskState.TASK_STATE_SUBMITTED) {
        if (parts.length) await reply(parts, 'status', taskId);
      } else if (state === TaskState.TASK_STATE_COMPLETED) {
        if (parts.length && e.$case !== 'task') await reply(parts, 'message', taskId);
      } else if (state !== TaskState.TASK_STATE_UNSPECIFIED) {
        const name = TaskState[state]?.replace('TASK_STATE_', '').toLowerCase() ?? 'ended';
        await reply(
          parts.length ? parts : partsToA2a([{ type: 'text', text: `task ${name}` }]),
          'status',
          taskId,
          {
            state: name,
          },
        );
      }
    };
    const remember = async (contextId: string) => {
      if (contextId && (storedCtx?.operation !== 'PUT' || storedCtx.string() !== contextId))
        await service.kv().put(ctxKey, contextId);
    };
    const reply = async (
      parts: readonly A2aPart[],
      kind: 'message' | 'status',
      taskId?: string,
      o: { state?: string; mentions?: string[] } = {},
    ) => {
      const converted = partsFromA2a(parts);
      if (!converted.length) return;
      await room.send(converted, {
        kind,
        replyTo: m.id,
        delegation: null,
        ...(o.mentions?.length ? { mentions: o.mentions } : {}),
        metadata: {
          ...(taskId ? { [A2A_META.task]: taskId } : {}),
          ...(o.state ? { [A2A_META.state]: o.state } : {}),
        },
      });
    };
    const params = { tenant: '', message, configuration: undefined, metadata: undefined };
    if (record.streaming) {
      for await (const e of client.sendMessageStream(params)) await emit(e.payload);
    } else {
      const result = await client.sendMessage(params);
      if ('status' in result) await emit({ $case: 'task', value: result });
      else await emit({ $case: 'message', value: result });
    }
  }

  const isNetwork = (err: unknown) =>
    err instanceof TypeError ||
    /fetch failed|ECONNREFUSED|ECONNRESET|socket|network/i.test(String((err as Error)?.message));

  void (async () => {
    let backoff = 500;
    while (!stop.signal.aborted) {
      let held: Awaited<ReturnType<GatewayService['pool']['acquire']>> | undefined;
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
  return { stop: () => stop.abort() };
}
