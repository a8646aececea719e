/**
 * The MCP service: runtime bindings (`bindings.*`) and the access tokens of the Streamable HTTP
 * endpoint (`mcp.*`), both in KV bucket `parley_bindings`; it also verifies a presented token for
 * the HTTP endpoint (see http.ts). The stdio bridge (`parley mcp`) runs next to the MCP client with
 * the agent's own creds and uses this service only for bindings.
 */
import { jetstream } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  type BoundRoom,
  bindingKeys,
  bindingsApi,
  buckets,
  isParticipantId,
  MAX_BOUND_ROOMS,
  type McpTokenInfo,
  McpTokenRecord,
  mcpApi,
  ParleyError,
  type PrincipalId,
  policyKeys,
  RuntimeBinding,
  readStanding,
  registryApi,
  request,
  serviceId,
} from '@parley/contracts';
import {
  appendAudit,
  bind,
  createMicroService,
  createStandingView,
  type Logger,
  type ParleyService,
  packageVersion,
  type ServiceResponder,
  type ServiceTelemetry,
  type StandingView,
  serveApis,
  snapshotKv,
  startKvm,
  updateKv,
} from '@parley/kit';
import { mintToken, parseToken, secretMatches } from './tokens.js';

/** What the MCP service needs. */
export interface McpServiceDeps extends ServiceTelemetry, ServiceResponder {
  /** A connection with the service's creds (`svc_mcp`). */
  nc: NatsConnection;
  log: Logger;
  /**
   * Opens a connection with the service's creds whose reply prefix is `_INBOX.<principal>`. The HTTP
   * endpoint acts as each agent over one: services answer only to a caller's own `_INBOX.<caller>.`,
   * so requests made for the agent on `nc` (reply prefix `_INBOX.svc_mcp`) would get no answer.
   * @default none: /mcp sessions cannot open (UNAVAILABLE)
   */
  connectAs?: ((principal: string) => Promise<NatsConnection>) | undefined;
}

/** Who a verified bearer token acts as. */
export interface TokenIdentity {
  agent: string;
  tokenId: string;
}

/** The MCP service, plus what the HTTP endpoint needs of it. */
export interface McpService extends ParleyService {
  /**
   * The agent a bearer token acts as. Throws `UNAUTHENTICATED` for anything malformed, unknown or
   * with a wrong secret (one message for all), `REVOKED`/`EXPIRED` for a dead token, and
   * `SUSPENDED`/`REVOKED` when the agent itself may not act.
   */
  verifyToken(token: string): Promise<TokenIdentity>;
  /** The service's connection. */
  readonly nc: NatsConnection;
  /** A connection that speaks for `principal` (reply prefix `_INBOX.<principal>`); see McpServiceDeps. */
  connectAs(principal: string): Promise<NatsConnection>;
}

const SELF = serviceId('mcp');

/** Creates the MCP service. */
export function createMcpService(deps: McpServiceDeps): McpService {
  const log = deps.log.child({ component: 'mcp' });
  let micro: ReturnType<typeof createMicroService> | undefined;
  let standing: StandingView | undefined;
  let bindingsKv: KV | undefined;
  let policyKv: KV | undefined;
  let started = false;
  const js = jetstream(deps.nc);

  const kv = () => {
    if (!bindingsKv) throw new ParleyError('UNAVAILABLE', 'the MCP service is not started');
    return bindingsKv;
  };

  const owner = (caller: string): string => {
    if (!isParticipantId(caller)) {
      throw new ParleyError('PERMISSION_DENIED', 'bindings belong to participants (usr_… or agt_…)');
    }
    return caller;
  };

  /**
   * Reads, changes and writes one binding with compare-and-set, retrying when another writer got
   * there first (two sessions of one participant may advance at once).
   */
  async function changeBinding(
    key: string,
    fresh: () => RuntimeBinding,
    change: (b: RuntimeBinding) => RuntimeBinding,
  ): Promise<RuntimeBinding> {
    const r = await updateKv<RuntimeBinding>(kv(), key, (b) => change(b ?? fresh()), {
      schema: RuntimeBinding,
      what: 'the runtime binding',
    });
    return r.value as RuntimeBinding;
  }

  function freshBinding(participant: string, runtime: string, externalId: string): () => RuntimeBinding {
    return () => {
      const now = new Date().toISOString();
      return { participant, runtime, externalId, rooms: {}, createdAt: now, updatedAt: now };
    };
  }

  /** The agent, its owner, an admin of its org (or the superadmin) may manage its tokens. */
  async function checkManage(caller: string, agent: string): Promise<void> {
    if (caller === agent) return;
    await request(
      deps.nc,
      SELF,
      registryApi.checkManage,
      { actor: caller as PrincipalId, participant: agent },
      { tracer: deps.tracer },
    );
  }

  async function readToken(id: string): Promise<{ record: McpTokenRecord; revision: number } | undefined> {
    const e = await kv().get(bindingKeys.token(id));
    if (e?.operation !== 'PUT') return undefined;
    return { record: McpTokenRecord.parse(e.json()), revision: e.revision };
  }

  const info = ({ secretSha256: _, ...rest }: McpTokenRecord): McpTokenInfo => rest;

  return {
    name: 'mcp',
    nc: deps.nc,
    ready: () => started,
    async connectAs(principal) {
      if (!deps.connectAs)
        throw new ParleyError('UNAVAILABLE', 'this MCP service cannot act as agents (no connectAs)');
      return deps.connectAs(principal);
    },

    async verifyToken(token) {
      const parsed = parseToken(token);
      const found = parsed ? await readToken(parsed.id) : undefined;
      if (!parsed || !found || !secretMatches(parsed.secret, found.record.secretSha256)) {
        throw new ParleyError('UNAUTHENTICATED', 'unknown or malformed bearer token');
      }
      const r = found.record;
      if (r.revokedAt) throw new ParleyError('REVOKED', `token ${r.id} was revoked`);
      if (r.expiresAt && Date.parse(r.expiresAt) <= Date.now()) {
        throw new ParleyError('EXPIRED', `token ${r.id} expired at ${r.expiresAt}`);
      }
      const policy = await policyKv?.get(policyKeys.participant(r.agent));
      if (policy?.operation === 'PUT') {
        // The same reading as every other service: a malformed record is suspended.
        const p = readStanding(policy.value).standing;
        if (p.status === 'suspended')
          throw new ParleyError('SUSPENDED', `${r.agent} is suspended: ${p.reason}`);
        if (p.status === 'revoked') throw new ParleyError('REVOKED', `${r.agent} was revoked: ${p.reason}`);
      }
      return { agent: r.agent, tokenId: r.id };
    },

    async start() {
      const kvm = startKvm(deps.nc, { log });
      bindingsKv = await kvm.open(buckets.bindings);
      policyKv = await kvm.open(buckets.policy);
      micro = createMicroService(deps.responder ?? deps.nc, {
        name: 'parley-mcp',
        version: packageVersion(import.meta.url),
        description: 'MCP bridge: runtime bindings and the access tokens of the HTTP endpoint.',
      });
      standing = await createStandingView(policyKv, { log, metrics: deps.metrics });
      const common = { log, tracer: deps.tracer, metrics: deps.metrics, standing };
      serveApis(
        micro,
        [
          bind(bindingsApi.bind, async (req, ctx) => {
            const p = owner(ctx.caller);
            return changeBinding(
              bindingKeys.binding(p, req.runtime, req.externalId),
              freshBinding(p, req.runtime, req.externalId),
              (b) => ({
                ...b,
                ...(req.session ? { session: req.session } : {}),
                updatedAt: new Date().toISOString(),
              }),
            );
          }),
          bind(bindingsApi.advance, async (req, ctx) => {
            const p = owner(ctx.caller);
            return changeBinding(
              bindingKeys.binding(p, req.runtime, req.externalId),
              freshBinding(p, req.runtime, req.externalId),
              (b) => {
                const now = new Date().toISOString();
                const rooms: Record<string, BoundRoom> = { ...b.rooms };
                for (const [room, seq] of Object.entries(req.positions)) {
                  const was = rooms[room];
                  rooms[room] = {
                    lastReturned: Math.max(was?.lastReturned ?? 0, seq),
                    since: was?.since ?? now,
                  };
                }
                // Bounded: the rooms joined longest ago go first.
                const kept = Object.entries(rooms)
                  .sort((x, y) => y[1].since.localeCompare(x[1].since))
                  .slice(0, MAX_BOUND_ROOMS);
                return { ...b, rooms: Object.fromEntries(kept), updatedAt: now };
              },
            );
          }),
          bind(bindingsApi.list, async (_req, ctx) => {
            const entries = await snapshotKv(kv(), bindingKeys.bindingsOf(owner(ctx.caller)));
            return { bindings: [...entries.values()].map((e) => RuntimeBinding.parse(e.json())) };
          }),
          bind(bindingsApi.unbind, async (req, ctx) => {
            const key = bindingKeys.binding(owner(ctx.caller), req.runtime, req.externalId);
            const e = await kv().get(key);
            if (e?.operation !== 'PUT') return { removed: false };
            await kv().delete(key);
            return { removed: true };
          }),
        ],
        { service: 'bindings', queue: 'mcp', ...common },
      );
      serveApis(
        micro,
        [
          bind(mcpApi.createToken, async (req, ctx) => {
            await checkManage(ctx.caller, req.agent);
            const minted = mintToken();
            const now = new Date();
            const record = McpTokenRecord.parse({
              id: minted.id,
              agent: req.agent,
              label: req.label,
              secretSha256: minted.secretSha256,
              createdBy: ctx.caller,
              createdAt: now.toISOString(),
              ...(req.ttlDays
                ? { expiresAt: new Date(now.getTime() + req.ttlDays * 86_400_000).toISOString() }
                : {}),
            });
            await kv().create(bindingKeys.token(record.id), JSON.stringify(record));
            await appendAudit(js, {
              domain: 'credentials',
              action: 'mcp_token.create',
              actor: ctx.caller as PrincipalId,
              target: req.agent,
              data: { token: record.id, label: record.label, expiresAt: record.expiresAt },
            });
            return { token: minted.token, info: info(record) };
          }),
          bind(mcpApi.listTokens, async (req, ctx) => {
            await checkManage(ctx.caller, req.agent);
            const all = await snapshotKv(kv(), bindingKeys.token('>'));
            const tokens = [...all.values()]
              .map((e) => McpTokenRecord.parse(e.json()))
              .filter((r) => r.agent === req.agent)
              .map(info);
            return { tokens };
          }),
          bind(mcpApi.revokeToken, async (req, ctx) => {
            const found = await readToken(req.id);
            if (!found) throw new ParleyError('NOT_FOUND', `no token ${req.id}`);
            await checkManage(ctx.caller, found.record.agent);
            if (found.record.revokedAt) return { id: req.id, revoked: false };
            const record = { ...found.record, revokedAt: new Date().toISOString() };
            await kv().update(bindingKeys.token(req.id), JSON.stringify(record), found.revision);
            await appendAudit(js, {
              domain: 'credentials',
              action: 'mcp_token.revoke',
              actor: ctx.caller as PrincipalId,
              target: found.record.agent,
              data: { token: req.id },
            });
            log.info({ token: req.id, agent: found.record.agent }, 'MCP token revoked');
            return { id: req.id, revoked: true };
          }),
        ],
        { service: 'mcp', queue: 'mcp', ...common },
      );
      started = true;
    },

    async stop() {
      started = false;
      await micro?.stop();
      standing?.stop();
    },
  };
}
