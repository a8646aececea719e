/**
 * Parley agents as A2A servers (A2A v1.0, v0.3 through the SDK's legacy mode), served by the gateway
 * with the official `@a2a-js/sdk` server pieces:
 *
 * - `GET /a2a` — the directory: the A2A cards of the agents the caller may discover.
 * - `/a2a/<agentId>/.well-known/agent-card.json` — the agent's card; `/a2a/<agentId>/jsonrpc`
 *   (JSON-RPC: `message/send`, `message/stream`, `tasks/get|list|cancel|resubscribe`, push configs)
 *   and `/a2a/<agentId>/rest` (HTTP+JSON).
 *
 * Why express inside fastify: the SDK's transports (version negotiation with -32009, the v0.3
 * compat layer, SSE framing, REST error bodies) ship as express handlers. The gateway authenticates
 * the request in a fastify hook exactly as for `/v1`, then hands the raw request to an express app
 * (`reply.hijack()`); no extra fastify plugin is needed. The caller is the authenticated principal
 * (the SDK `User`), so every task is scoped to it and every Parley call goes over its own connection.
 * Cards are served to authenticated callers only, and only for agents the registry lets them see.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AgentCard as A2aCard } from '@a2a-js/sdk';
import { DefaultRequestHandler, type User } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, restHandler } from '@a2a-js/sdk/server/express';
import { type Agent, errorCodes, governanceApi, registryApi, request, serviceId } from '@parley/contracts';
import express, { type Request } from 'express';
import type { FastifyInstance } from 'fastify';
import { LRUCache } from 'lru-cache';
import { authenticateRequest } from '../http.js';
import { sendProblem, toClientError } from '../problem.js';
import type { GatewayService, Principal } from '../service.js';
import { CallerInboxes, createParleyExecutor } from './executor.js';
import { startRemoteA2a } from './remote.js';
import { ReplicaEventBusManager } from './replicas.js';
import { createKvTaskStore, createPushSender, createPushStore, watchPushConfigs } from './store.js';

type RawWithPrincipal = IncomingMessage & { principal?: Principal };

/** The authenticated principal as the SDK's user. */
class PrincipalUser implements User {
  constructor(private readonly p: Principal) {}
  get isAuthenticated() {
    return true;
  }
  get userName() {
    return this.p.participant;
  }
}

/** The A2A card of a Parley agent served at `base` (`…/a2a/<agentId>`). */
export function a2aCardOf(listing: Pick<Agent, 'id' | 'card'>, base: string, oidcIssuer?: string): A2aCard {
  const c = listing.card;
  const jsonrpc = `${base}/jsonrpc`;
  const rest = `${base}/rest`;
  return {
    name: c.name,
    description: c.description || `Parley agent ${listing.id}`,
    supportedInterfaces: [
      { url: jsonrpc, protocolBinding: 'JSONRPC', protocolVersion: '1.0', tenant: '' },
      { url: rest, protocolBinding: 'HTTP+JSON', protocolVersion: '1.0', tenant: '' },
      { url: jsonrpc, protocolBinding: 'JSONRPC', protocolVersion: '0.3', tenant: '' },
      { url: rest, protocolBinding: 'HTTP+JSON', protocolVersion: '0.3', tenant: '' },
    ],
    provider: c.provider ? { organization: c.provider.organization, url: c.provider.url ?? '' } : undefined,
    version: c.version,
    // Streaming always works through the bridge; push notifications go out from the gateway.
    capabilities: { streaming: true, pushNotifications: true, extensions: [], extendedAgentCard: false },
    securitySchemes: {
      apiKey: {
        scheme: {
          $case: 'httpAuthSecurityScheme',
          value: {
            scheme: 'Bearer',
            bearerFormat: 'pak',
            description: 'A Parley API key (parley key create)',
          },
        },
      },
      ...(oidcIssuer
        ? {
            oidc: {
              scheme: {
                $case: 'openIdConnectSecurityScheme',
                value: {
                  openIdConnectUrl: `${oidcIssuer.replace(/\/$/, '')}/.well-known/openid-configuration`,
                  description: "The company's identity provider (bearer ID/access token)",
                },
              },
            },
          }
        : {}),
    },
    securityRequirements: [
      { schemes: { apiKey: { list: [] } } },
      ...(oidcIssuer ? [{ schemes: { oidc: { list: [] } } }] : []),
    ],
    defaultInputModes: c.defaultInputModes,
    defaultOutputModes: c.defaultOutputModes,
    skills: c.skills.map((s) => ({
      id: s.id,
      name: s.name,
      description: s.description || s.name,
      tags: s.tags,
      examples: s.examples,
      inputModes: [],
      outputModes: [],
      securityRequirements: [],
    })),
    signatures: [],
  };
}

/** Registers `/a2a` on the gateway's fastify app. */
export async function registerA2a(app: FastifyInstance, service: GatewayService): Promise<void> {
  const log = service.log.child({ component: 'a2a' });
  const inboxes = new CallerInboxes(service, log);
  const taskStore = createKvTaskStore(() => service.kv());
  const allowPrivate = new Set(
    service.config.PARLEY_WEBHOOK_ALLOW_PRIVATE.split(',')
      .map((s) => s.trim().toLowerCase())
      .filter(Boolean),
  );
  const pushStore = createPushStore(() => service.kv(), allowPrivate);
  const pushConfigs = await watchPushConfigs(service.kv(), log);
  const pushSender = createPushSender(pushConfigs, allowPrivate, log);
  // One request handler per agent (and base URL, and card revision); the event buses of the tasks it
  // runs are in its ReplicaEventBusManager, shared with the other replicas over NATS.
  const handlers = new LRUCache<string, { router: express.Router }>({ max: 1000 });
  const executors = new Map<string, ReturnType<typeof createParleyExecutor>>();

  const baseOf = (req: Request) => {
    const pub = service.config.PARLEY_GATEWAY_PUBLIC_URL?.replace(/\/$/, '');
    return pub ?? `${req.protocol}://${req.get('host')}`;
  };
  const userBuilder = async (req: Request) =>
    new PrincipalUser((req as unknown as RawWithPrincipal).principal as Principal);

  async function listingFor(principal: Principal, agent: string): Promise<Agent> {
    const held = await service.pool.acquire(principal.participant);
    try {
      return (await held.agent.call(registryApi.getAgent, { agent: agent as never })).agent;
    } finally {
      held.release();
    }
  }

  function routerFor(listing: Agent, base: string) {
    const key = `${listing.id} ${listing.revision} ${base}`;
    const cached = handlers.get(key);
    if (cached) return cached.router;
    const card = a2aCardOf(listing, `${base}/a2a/${listing.id}`, service.config.PARLEY_OIDC_ISSUER);
    let executor = executors.get(listing.id);
    if (!executor) {
      executor = createParleyExecutor({ service, agentId: listing.id, inboxes, log });
      executors.set(listing.id, executor);
    }
    // Events of tasks run here are shared over NATS; a task another replica runs is followed there.
    const busManager = new ReplicaEventBusManager(service.nc, log);
    const handler = new DefaultRequestHandler(card, taskStore, executor, busManager, pushStore, pushSender);
    const router = express.Router();
    const legacyCompat = { enabled: true };
    router.use(
      '/.well-known/agent-card.json',
      agentCardHandler({ agentCardProvider: handler, legacyCompat }),
    );
    router.use('/jsonrpc', jsonRpcHandler({ requestHandler: handler, userBuilder, legacyCompat }));
    router.use('/rest', restHandler({ requestHandler: handler, userBuilder, legacyCompat }));
    handlers.set(key, { router });
    return router;
  }

  const ex = express();
  ex.disable('x-powered-by');
  ex.get('/a2a', async (req, res) => {
    const principal = (req as unknown as RawWithPrincipal).principal as Principal;
    const held = await service.pool.acquire(principal.participant);
    try {
      const found = await held.agent.call(registryApi.discover, { limit: 100 });
      const base = baseOf(req);
      res.json({
        agents: found.agents.map(({ agent: a }) => ({
          id: a.id,
          cardUrl: `${base}/a2a/${a.id}/.well-known/agent-card.json`,
          card: a2aCardOf(a, `${base}/a2a/${a.id}`, service.config.PARLEY_OIDC_ISSUER),
        })),
      });
    } finally {
      held.release();
    }
  });
  ex.use('/a2a/:agent', async (req, res, next) => {
    const principal = (req as unknown as RawWithPrincipal).principal as Principal;
    try {
      const listing = await listingFor(principal, req.params.agent as string);
      routerFor(listing, baseOf(req))(req, res, next);
    } catch (err) {
      next(err);
    }
  });
  ex.use((req, res) => {
    res
      .status(404)
      .type('application/problem+json')
      .json({ code: 'NOT_FOUND', detail: `no A2A route ${req.method} ${req.path}` });
  });
  ex.use((err: unknown, _req: Request, res: express.Response, _next: express.NextFunction) => {
    const e = toClientError(err, log);
    const status = errorCodes[e.code].status;
    res
      .status(status)
      .type('application/problem+json')
      .json({ type: 'about:blank', title: e.code, status, detail: e.message, code: e.code });
  });

  const hand = async (req: import('fastify').FastifyRequest, reply: import('fastify').FastifyReply) => {
    let principal: Principal;
    try {
      principal = await authenticateRequest(service, req);
    } catch (err) {
      return sendProblem(reply, toClientError(err, log));
    }
    (req.raw as RawWithPrincipal).principal = principal;
    reply.hijack();
    ex(req.raw as IncomingMessage as Request, reply.raw as ServerResponse as express.Response);
  };
  // Imported A2A agents: the import API and one proxy per agent, for as long as the HTTP side runs.
  const stopRemote = await startRemoteA2a(service, log);
  app.addHook('onClose', async () => {
    for (const e of executors.values()) e.stopAll();
    pushConfigs.stop();
    await stopRemote();
  });
  await app.register(async (a2a) => {
    // Governance's public delegation keys, for callees that verify Parley delegation tokens: public.
    a2a.get('/a2a/jwks.json', async (_req, reply) => {
      const jwks = await request(service.nc, serviceId('gateway'), governanceApi.jwks, {});
      return reply.header('cache-control', 'public, max-age=300').send(jwks);
    });
    // Authenticated before fastify reads the body: the express side parses it.
    for (const url of ['/a2a', '/a2a/*']) {
      a2a.route({ method: ['GET', 'POST', 'DELETE'], url, onRequest: hand, handler: async () => undefined });
    }
  });
  if (!service.config.PARLEY_GATEWAY_PUBLIC_URL) log.debug('A2A card URLs follow the Host header');
}
