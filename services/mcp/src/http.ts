/**
 * The bridge over Streamable HTTP: the same tools at `/mcp` on a Fastify server, for MCP clients
 * that cannot spawn a process. Each request must
 *
 * 1. name a loopback host (or one of `allowedHosts`) in `Host` and, when present, `Origin`: DNS
 *    rebinding protection, checked before anything else (403);
 * 2. carry `Authorization: Bearer <token>` with a token minted for one agent (`mcp.createToken`,
 *    what `parley connect` does), live, of an agent that may act (401 otherwise, the Parley code in
 *    the JSON-RPC error);
 * 3. belong to a session that token opened (`Mcp-Session-Id`; a session never moves to another
 *    token), or be an `initialize` that opens one.
 *
 * The endpoint acts as the token's agent over the MCP service's own connection (see `attach` in the
 * SDK). All sessions of one agent in this process share one runtime — one pull consumer of the
 * agent's inbox and the binding `mcp-http/<agentId>` — because the inbox is per agent: two sessions
 * of one agent take turns at its messages rather than both seeing each.
 */
import { randomUUID } from 'node:crypto';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import type { NatsConnection } from '@nats-io/transport-node';
import { bindingsApi, isParleyError, ParleyError } from '@parley/contracts';
import type { Logger } from '@parley/kit';
import { attach, drainConnection } from '@parley/sdk';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { type AgentRuntime, openRuntime } from './runtime.js';
import { type BridgeServer, createBridgeServer } from './server.js';
import type { McpService, TokenIdentity } from './service.js';
import type { WaitLimits } from './tools.js';

/** Options of {@link registerMcpHttp}. */
export interface McpHttpOptions {
  /** Verifies tokens; its connection is what sessions act over. */
  service: Pick<McpService, 'verifyToken' | 'connectAs'>;
  log: Logger;
  /** Host names accepted in `Host`/`Origin` besides localhost, 127.0.0.1 and ::1. @default none */
  allowedHosts?: string[];
  /** Sessions without a request for this long are closed. @default 30 minutes */
  idleMs?: number;
  limits?: Partial<WaitLimits>;
  /** The route. @default /mcp */
  path?: string;
}

interface Session {
  transport: StreamableHTTPServerTransport;
  bridge: BridgeServer;
  identity: TokenIdentity;
  lastSeen: number;
}

const LOOPBACK = ['localhost', '127.0.0.1', '::1', '[::1]'];

function hostnameOf(value: string): string | undefined {
  try {
    return new URL(value.includes('://') ? value : `http://${value}`).hostname.toLowerCase();
  } catch {
    return undefined;
  }
}

function rpcError(reply: FastifyReply, status: number, message: string, data?: Record<string, unknown>) {
  return reply
    .code(status)
    .header('content-type', 'application/json')
    .send({ jsonrpc: '2.0', error: { code: -32000, message, ...(data ? { data } : {}) }, id: null });
}

/** Registers `/mcp` on `app`; sessions and runtimes are closed with the app. */
export async function registerMcpHttp(app: FastifyInstance, o: McpHttpOptions): Promise<void> {
  const path = o.path ?? '/mcp';
  const log = o.log.child({ component: 'mcp-http' });
  const allowed = new Set([...LOOPBACK, ...(o.allowedHosts ?? []).map((h) => h.toLowerCase())]);
  const sessions = new Map<string, Session>();
  const runtimes = new Map<string, { runtime: Promise<AgentRuntime>; refs: number }>();

  async function acquire(agent: string): Promise<AgentRuntime> {
    let entry = runtimes.get(agent);
    if (!entry) {
      // One connection per agent, with the agent's reply prefix: services answer only there.
      let nc: NatsConnection | undefined;
      const runtime = openRuntime({
        agent: async (delivery) => {
          nc = await o.service.connectAs(agent);
          return attach(nc, agent, { delivery });
        },
        key: { runtime: 'mcp-http', externalId: agent },
        onError: (err) => log.warn({ err, agent }, 'delivery error'),
      }).then(
        async (r) => {
          await r.agent.presence.start({});
          const close = r.close.bind(r);
          return Object.assign(r, {
            close: async () => {
              await close();
              if (nc) await drainConnection(nc);
            },
          });
        },
        async (err: unknown) => {
          await nc?.close().catch(() => undefined);
          throw err;
        },
      );
      entry = { runtime, refs: 0 };
      runtimes.set(agent, entry);
      runtime.catch(() => runtimes.delete(agent));
    }
    entry.refs++;
    return entry.runtime;
  }

  async function release(agent: string): Promise<void> {
    const entry = runtimes.get(agent);
    if (!entry || --entry.refs > 0) return;
    runtimes.delete(agent);
    await (await entry.runtime).close();
  }

  async function closeSession(id: string): Promise<void> {
    const s = sessions.get(id);
    if (!s) return;
    sessions.delete(id);
    await s.bridge.close().catch((err) => log.warn({ err }, 'closing an MCP session failed'));
    await release(s.identity.agent).catch((err) => log.warn({ err }, 'closing a runtime failed'));
  }

  async function openSession(identity: TokenIdentity): Promise<Session> {
    const runtime = await acquire(identity.agent);
    const session: Session = {
      identity,
      lastSeen: Date.now(),
      bridge: createBridgeServer({
        runtime,
        ...(o.limits ? { limits: o.limits } : {}),
        onError: (err, where) => log.error({ err, where, agent: identity.agent }, 'MCP tool failed'),
      }),
      transport: new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => {
          sessions.set(id, session);
          void runtime.agent
            .call(bindingsApi.bind, { ...runtime.key, session: id })
            .catch((err) => log.warn({ err }, 'recording the session in the binding failed'));
        },
        onsessionclosed: (id) => closeSession(id),
      }),
    };
    await session.bridge.connect(session.transport);
    return session;
  }

  // Sessions a client abandoned without DELETE.
  const idleMs = o.idleMs ?? 30 * 60_000;
  const sweep = setInterval(
    () => {
      const now = Date.now();
      for (const [id, s] of sessions) if (now - s.lastSeen > idleMs) void closeSession(id);
    },
    Math.min(60_000, idleMs),
  );
  sweep.unref();

  // preClose, not onClose: open SSE streams would keep the server from closing before onClose runs.
  app.addHook('preClose', async () => {
    clearInterval(sweep);
    await Promise.allSettled([...sessions.keys()].map(closeSession));
  });

  const handler = async (req: FastifyRequest, reply: FastifyReply) => {
    const host = hostnameOf(req.headers.host ?? '');
    const origin = req.headers.origin;
    if (!host || !allowed.has(host) || (origin !== undefined && !allowed.has(hostnameOf(origin) ?? ''))) {
      return rpcError(
        reply,
        403,
        'Forbidden: the Host or Origin header names a host this server does not serve',
      );
    }
    const bearer = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '')?.[1];
    let identity: TokenIdentity;
    try {
      if (!bearer)
        throw new ParleyError('UNAUTHENTICATED', 'missing bearer token (Authorization: Bearer <token>)');
      identity = await o.service.verifyToken(bearer);
    } catch (err) {
      const e = isParleyError(err)
        ? err
        : new ParleyError('UNAVAILABLE', 'tokens cannot be checked right now');
      if (!isParleyError(err)) log.error({ err }, 'token verification failed');
      const status = e.code === 'UNAVAILABLE' ? 503 : e.code === 'SUSPENDED' ? 403 : 401;
      void reply.header(
        'www-authenticate',
        bearer
          ? `Bearer realm="parley", error="invalid_token", error_description="${e.code}"`
          : 'Bearer realm="parley"',
      );
      return rpcError(reply, status, `${e.code}: ${e.message}`, { code: e.code });
    }
    const sid = req.headers['mcp-session-id'];
    let session: Session | undefined;
    if (typeof sid === 'string') {
      session = sessions.get(sid);
      // Unknown, closed, or another token's session: all look the same from outside.
      if (!session || session.identity.tokenId !== identity.tokenId) {
        return rpcError(reply, 404, 'Session not found: initialize a new one');
      }
    } else if (req.method === 'POST' && isInitializeRequest(req.body)) {
      let fresh: Session;
      try {
        fresh = await openSession(identity);
      } catch (err) {
        const e = isParleyError(err) ? err : new ParleyError('INTERNAL');
        if (!isParleyError(err)) log.error({ err }, 'opening an MCP session failed');
        return rpcError(reply, e.code === 'UNAVAILABLE' ? 503 : 500, `${e.code}: ${e.message}`, {
          code: e.code,
        });
      }
      reply.hijack();
      await fresh.transport.handleRequest(req.raw, reply.raw, req.body);
      // An initialize the transport refused opened no session: give back what it acquired.
      if (fresh.transport.sessionId === undefined || !sessions.has(fresh.transport.sessionId)) {
        await fresh.bridge.close().catch(() => undefined);
        await release(identity.agent).catch(() => undefined);
      }
      return;
    } else {
      return rpcError(
        reply,
        400,
        'Bad Request: no valid session id (Mcp-Session-Id), and not an initialize request',
      );
    }
    session.lastSeen = Date.now();
    reply.hijack();
    await session.transport.handleRequest(req.raw, reply.raw, req.body);
  };
  app.route({ method: ['GET', 'POST', 'DELETE'], url: path, handler });
}
