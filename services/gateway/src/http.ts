/**
 * The gateway's HTTP side, registered on a Fastify app (the standalone server next to /healthz, or
 * the gateway's own process): `/v1` REST routes made from the route table, the live stream,
 * inbound webhooks, the login link, `/openapi.json` and `/docs`. Each route group is an
 * encapsulated plugin; authentication is a hook of the groups that need it.
 *
 * Every authenticated request acts through the principal's own NATS connection (the pool), so the
 * NATS server applies that principal's permissions and the services apply its refusals.
 */

import websocket from '@fastify/websocket';
import { invalidArgument, ParleyError, type SendReply } from '@parley/contracts';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { registerA2a } from './a2a/server.js';
import { registerConsole } from './console.js';
import { registerHooks } from './hooks.js';
import { registerDocs } from './openapi.js';
import { sendProblem, toClientError } from './problem.js';
import { partsOf, type RestRoute, restRoutes, SendBody } from './routes.js';
import type { GatewayService, Principal } from './service.js';
import { registerStream } from './stream.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Who the request is from (set by the authentication hook). */
    principal?: Principal;
  }
}

/** The session cookie set by the login link (browsers; other clients send Authorization: Bearer). */
export const SESSION_COOKIE = 'parley_session';

/** Options of {@link registerGateway}. */
export interface GatewayHttpOptions {
  service: GatewayService;
}

function cookie(req: FastifyRequest, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return decodeURIComponent(part.slice(eq + 1).trim());
  }
  return undefined;
}

function originHost(origin: string): string | undefined {
  try {
    return new URL(origin).host;
  } catch {
    return undefined;
  }
}

/** Authenticates a request: `Authorization: Bearer …`, else the session cookie. */
export async function authenticateRequest(service: GatewayService, req: FastifyRequest): Promise<Principal> {
  const header = req.headers.authorization;
  if (header !== undefined) {
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1];
    if (!bearer) throw new ParleyError('UNAUTHENTICATED', 'Authorization must be "Bearer <token>"');
    return service.authenticate(bearer);
  }
  const session = cookie(req, SESSION_COOKIE);
  if (!session) {
    throw new ParleyError(
      'UNAUTHENTICATED',
      'missing credentials: send Authorization: Bearer <API key or token>',
    );
  }
  // A cookie travels with cross-site requests; a write, or a WebSocket upgrade (which reads the
  // inbox), must come from this origin (SameSite=Strict is the first line, this the second).
  const origin = req.headers.origin;
  const guarded = req.method !== 'GET' || req.headers.upgrade?.toLowerCase() === 'websocket';
  if (guarded && origin !== undefined && originHost(origin) !== req.headers.host) {
    throw new ParleyError('PERMISSION_DENIED', 'cross-origin request with a session cookie');
  }
  return service.authenticate(session);
}

/** Throws unless the principal's credential allows `scope`. */
export function requireScope(principal: Principal, scope: 'read' | 'write'): void {
  if (!principal.scopes.includes(scope)) {
    throw new ParleyError('PERMISSION_DENIED', `this API key does not have the ${scope} scope`, {
      details: { scope },
    });
  }
}

/** Runs `fn` with the principal's own connection. */
export async function asPrincipal<T>(
  service: GatewayService,
  principal: Principal,
  fn: (agent: Awaited<ReturnType<GatewayService['pool']['acquire']>>['agent']) => Promise<T>,
): Promise<T> {
  const held = await service.pool.acquire(principal.participant);
  try {
    return await fn(held.agent);
  } finally {
    held.release();
  }
}

async function handle(service: GatewayService, route: RestRoute, req: FastifyRequest, reply: FastifyReply) {
  const principal = req.principal as Principal;
  requireScope(principal, route.scope);
  const input = {
    params: req.params as Record<string, string>,
    query: req.query as Record<string, string | undefined>,
    body: req.body ?? {},
  };
  if (route.body) {
    const checked = route.body.safeParse(input.body);
    if (!checked.success) throw invalidArgument(checked.error, 'body');
  }
  const body = route.request(input);
  const api = route.api;
  if (api) {
    const checked = api.request.safeParse(body);
    if (!checked.success) throw invalidArgument(checked.error, `${api.service}.${api.method} request`);
    const result = await asPrincipal(service, principal, (agent) =>
      agent.call(api, body as never, { timeout: 10_000 }),
    );
    return reply.code(route.status ?? 200).send(result);
  }
  if (route.url === '/v1/rooms/:room/messages') {
    const b = SendBody.parse(body);
    const idempotency = req.headers['idempotency-key'];
    const clientMsgId = typeof idempotency === 'string' ? idempotency : b.clientMsgId;
    const sent: SendReply = await asPrincipal(service, principal, (agent) =>
      agent.rooms.room(input.params.room as string).send(partsOf(b) as never, {
        kind: b.kind ?? (b.handoff ? 'handoff' : 'message'),
        delegation: null,
        deadlineMs: 10_000,
        ...(b.mentions ? { mentions: b.mentions } : {}),
        ...(b.replyTo ? { replyTo: b.replyTo } : {}),
        ...(b.provenance ? { provenance: b.provenance } : {}),
        ...(b.task ? { task: b.task } : {}),
        ...(b.metadata ? { metadata: b.metadata } : {}),
        ...(clientMsgId ? { clientMsgId } : {}),
      }),
    );
    return reply.code(sent.duplicate ? 200 : 201).send(sent);
  }
  if (route.url === '/v1/presence' && route.method === 'PUT') {
    const b = route.body?.parse(body) as { state: string; activity?: string };
    if (b.state === 'offline')
      throw new ParleyError('INVALID_ARGUMENT', 'state offline is set by going away, not sent');
    await asPrincipal(service, principal, (agent) =>
      agent.presence.set(b.state as Parameters<typeof agent.presence.set>[0], b.activity),
    );
    return reply.send({ state: b.state, ...(b.activity ? { activity: b.activity } : {}) });
  }
  throw new Error(`route ${route.method} ${route.url} has no handler`);
}

/** Registers the gateway's routes on `app`. */
export async function registerGateway(app: FastifyInstance, o: GatewayHttpOptions): Promise<void> {
  const { service } = o;
  const log = service.log.child({ component: 'gateway-http' });
  await app.register(async (gw) => {
    gw.setErrorHandler((err, _req, reply) => sendProblem(reply, toClientError(err, log)));
    gw.setNotFoundHandler((req, reply) =>
      sendProblem(reply, new ParleyError('NOT_FOUND', `no route ${req.method} ${req.url.split('?')[0]}`)),
    );

    // REST: authenticated, one plugin per tag so each group stays its own context.
    const byTag = new Map<string, RestRoute[]>();
    for (const r of restRoutes) byTag.set(r.tag, [...(byTag.get(r.tag) ?? []), r]);
    for (const routes of byTag.values()) {
      await gw.register(async (group) => {
        group.addHook('onRequest', async (req) => {
          req.principal = await authenticateRequest(service, req);
        });
        for (const route of routes) {
          group.route({
            method: route.method,
            url: route.url,
            bodyLimit: service.config.PARLEY_GATEWAY_MAX_BODY_BYTES,
            handler: (req, reply) => handle(service, route, req, reply),
          });
        }
      });
    }

    // The one-time login link `npm start` prints: a session for the local admin, no identity provider needed.
    await gw.register(async (login) => {
      login.get('/v1/login', async (req, reply) => {
        const code = (req.query as { code?: string }).code;
        if (!code) throw new ParleyError('INVALID_ARGUMENT', 'the login link has no code');
        const session = await service.redeemLoginCode(code);
        const secure = service.config.PARLEY_GATEWAY_SECURE_COOKIES ? '; Secure' : '';
        void reply.header(
          'set-cookie',
          `${SESSION_COOKIE}=${encodeURIComponent(session.token)}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${12 * 3600}${secure}`,
        );
        if ((req.headers.accept ?? '').includes('text/html')) {
          return reply
            .type('text/html; charset=utf-8')
            .send(
              `<!doctype html><title>Parley</title><p>Signed in as <code>${session.participant}</code> until ${session.expiresAt}.</p><p>Bearer token for curl: <code>${session.token}</code></p><p><a href="/">Open the console</a> · <a href="/docs">API reference</a></p>`,
            );
        }
        return reply.send(session);
      });
    });

    await registerDocs(gw, service);
    await gw.register(websocket, { options: { maxPayload: 64 * 1024 } });
    await registerStream(gw, service);
    await registerHooks(gw, service);
    await registerA2a(gw, service);
    await registerConsole(gw, service);
  });
  log.debug({ routes: restRoutes.length }, 'gateway routes registered');
}
