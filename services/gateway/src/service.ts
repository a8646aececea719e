/**
 * The gateway service: who a request at the edge is (API keys, OIDC tokens, sign-in sessions), the
 * records behind that (KV bucket `parley_gateway`), and the NATS API that manages keys and webhooks
 * (`gateway.*`, what `parley key|hook|webhook` call). HTTP routes are in http.ts; they act for the
 * principal authenticated here through its own NATS connection from the {@link PrincipalPool}.
 */
import { jetstream } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  ApiKeyRecord,
  type ApiKeyScope,
  buckets,
  gatewayApi,
  gatewayKeys,
  HookRecord,
  isParleyError,
  newId,
  ParleyError,
  type PrincipalId,
  policyKeys,
  readStanding,
  registryApi,
  request,
  roomsApi,
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
  watchKv,
} from '@parley/kit';
import { LRUCache } from 'lru-cache';
import * as z from 'zod';
import type { GatewayConfig } from './config.js';
import { createOidcVerifier, type OidcIdentity, type OidcVerifier } from './oidc.js';
import { createOutbound, type Outbound } from './outbound.js';
import { createPrincipalPool, type PrincipalPool } from './pool.js';
import { mintBearer, mintWebhookSecret, parseBearer, secretMatches, sha256 } from './secrets.js';

/** Someone the gateway authenticated; requests go out over NATS as `participant`. */
export interface Principal {
  participant: string;
  /** How they proved it. */
  via: 'api_key' | 'oidc' | 'session';
  /** What the credential allows at the gateway (API keys may be narrower than the participant). */
  scopes: readonly ApiKeyScope[];
  /** The API key or session id, when there is one. */
  credentialId?: string;
}

/** What the gateway service needs. */
export interface GatewayDeps extends ServiceTelemetry, ServiceResponder {
  /** The gateway's service connection (`svc_gateway`). */
  nc: NatsConnection;
  /** NATS servers the principals' own connections go to. */
  servers: string[];
  log: Logger;
  config: GatewayConfig;
}

/** A sign-in session (`session.<id>`). */
const SessionRecord = z.object({
  id: z.string(),
  participant: z.string(),
  secretSha256: z.string(),
  createdAt: z.iso.datetime(),
  expiresAt: z.iso.datetime(),
});
type SessionRecord = z.infer<typeof SessionRecord>;

/** A one-time login code (`login.<sha256(code)>`). */
const LoginRecord = z.object({ participant: z.string(), expiresAt: z.iso.datetime() });

const ALL_SCOPES: readonly ApiKeyScope[] = ['read', 'write'];
const SELF = serviceId('gateway');
const SESSION_HOURS = 12;
const LOGIN_MINUTES = 15;

/** The gateway service; see the module comment. */
export interface GatewayService extends ParleyService {
  /** Who a bearer credential (or session cookie value) is; throws a ParleyError when it is nobody. */
  authenticate(bearer: string): Promise<Principal>;
  /** A one-time login code for a participant (the local admin's link of `npm start`). */
  createLoginCode(participant: string): Promise<string>;
  /** Trades a login code (once) for a session bearer `ses_…`. */
  redeemLoginCode(code: string): Promise<{ token: string; participant: string; expiresAt: string }>;
  /** Principals' own connections. */
  readonly pool: PrincipalPool;
  /** The gateway's service connection (`svc_gateway`): its own requests, buckets and streams. */
  readonly nc: NatsConnection;
  /** Where the gateway's APIs receive and answer requests (the responder connection when deployed). */
  readonly responder: NatsConnection;
  /** Who is suspended or revoked (parley_policy, watched), for every API the gateway serves; set by start(). */
  standing(): StandingView;
  /** Inbound hook records. */
  hook(id: string): Promise<HookRecord | undefined>;
  /** Outbound webhooks. */
  readonly outbound: Outbound;
  /** The gateway's bucket (hook event ids, stream cursors, dead letters). */
  kv(): KV;
  readonly config: GatewayConfig;
  readonly log: Logger;
}

/** Creates the gateway service. */
export function createGatewayService(deps: GatewayDeps): GatewayService {
  const log = deps.log.child({ component: 'gateway' });
  const js = jetstream(deps.nc);
  let bucket: KV | undefined;
  let micro: ReturnType<typeof createMicroService> | undefined;
  let stopWatch: (() => void) | undefined;
  let standingView: StandingView | undefined;
  let started = false;
  // Every API key, watched: a revocation on any replica stops the key on every replica at once.
  const keys = new Map<string, ApiKeyRecord>();
  // Revoked participants (parley_policy, watched): refused here, and their pooled connections closed.
  const revoked = new Set<string>();
  const oidc: OidcVerifier | undefined =
    deps.config.PARLEY_OIDC_ISSUER && deps.config.PARLEY_OIDC_AUDIENCE
      ? createOidcVerifier({
          issuer: deps.config.PARLEY_OIDC_ISSUER,
          audience: deps.config.PARLEY_OIDC_AUDIENCE,
          clockSkewSeconds: deps.config.PARLEY_OIDC_CLOCK_SKEW_S,
          jwksCooldownSeconds: deps.config.PARLEY_OIDC_JWKS_COOLDOWN_S,
        })
      : undefined;
  // Verified OIDC tokens → user, until the token expires (bounded: the LRU drops the oldest).
  const signedIn = new LRUCache<string, Principal>({ max: 10_000, ttlAutopurge: false });
  const jitDomains = new Set(
    deps.config.PARLEY_OIDC_JIT_DOMAINS.split(',')
      .map((d) => d.trim().toLowerCase())
      .filter(Boolean),
  );

  const pool = createPrincipalPool({
    nc: deps.nc,
    servers: deps.servers,
    log,
    max: deps.config.PARLEY_GATEWAY_POOL_SIZE,
    credsTtlSeconds: deps.config.PARLEY_GATEWAY_CREDS_TTL_S,
    delivery: () => ({ mode: 'pull' }),
  });

  const kv = () => {
    if (!bucket) throw new ParleyError('UNAVAILABLE', 'the gateway is not started', { retryAfterMs: 1000 });
    return bucket;
  };

  const outbound = createOutbound({ nc: deps.nc, kv, pool, log, config: deps.config, js });

  /** The agent itself, its owner, an admin of its org (or the superadmin) may manage its keys and hooks. */
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

  async function audit(action: string, actor: string, target: string, data: Record<string, unknown>) {
    await appendAudit(js, { domain: 'credentials', action, actor: actor as PrincipalId, target, data });
  }

  async function readJson<T>(
    schema: z.ZodType<T>,
    key: string,
  ): Promise<{ value: T; revision: number } | undefined> {
    const e = await kv().get(key);
    if (e?.operation !== 'PUT') return undefined;
    return { value: schema.parse(e.json()), revision: e.revision };
  }

  function keyOf(bearer: string): Principal {
    const parsed = parseBearer(bearer, 'pak');
    const record = parsed ? keys.get(parsed.id) : undefined;
    if (!parsed || !record || !secretMatches(parsed.secret, record.secretSha256)) {
      throw new ParleyError('UNAUTHENTICATED', 'unknown or malformed API key');
    }
    if (record.revokedAt) throw new ParleyError('REVOKED', `API key ${record.id} was revoked`);
    if (record.expiresAt && Date.parse(record.expiresAt) <= Date.now()) {
      throw new ParleyError('EXPIRED', `API key ${record.id} expired at ${record.expiresAt}`);
    }
    return { participant: record.agent, via: 'api_key', scopes: record.scopes, credentialId: record.id };
  }

  async function sessionOf(bearer: string): Promise<Principal> {
    const parsed = parseBearer(bearer, 'ses');
    const found = parsed ? await readJson(SessionRecord, gatewayKeys.session(parsed.id)) : undefined;
    if (!parsed || !found || !secretMatches(parsed.secret, found.value.secretSha256)) {
      throw new ParleyError('UNAUTHENTICATED', 'unknown or malformed session');
    }
    if (Date.parse(found.value.expiresAt) <= Date.now())
      throw new ParleyError('EXPIRED', 'the session expired');
    return {
      participant: found.value.participant,
      via: 'session',
      scopes: ALL_SCOPES,
      credentialId: parsed.id,
    };
  }

  /** The Parley user an OIDC identity is: linked `sub`, else the verified email, else JIT (allowed domains only). */
  async function userOf(id: OidcIdentity): Promise<string> {
    const link = gatewayKeys.oidc(sha256(id.issuer).slice(0, 32), sha256(id.subject).slice(0, 32));
    const linked = await kv().get(link);
    if (linked?.operation === 'PUT') return linked.string();
    let user: string | undefined;
    if (id.email) {
      try {
        user = (
          await request(deps.nc, SELF, registryApi.findUser, { email: id.email }, { tracer: deps.tracer })
        ).id;
      } catch (err) {
        if (!isParleyError(err, 'NOT_FOUND')) throw err;
      }
      const domain = id.email.slice(id.email.lastIndexOf('@') + 1).toLowerCase();
      if (!user && jitDomains.has(domain) && deps.config.PARLEY_OIDC_JIT_ORG) {
        const name = (id.name ?? id.email.slice(0, id.email.indexOf('@')))
          .replaceAll(/[^\p{L}\p{N} ._-]/gu, ' ')
          .trim()
          .slice(0, 80);
        const created = await request(
          deps.nc,
          SELF,
          registryApi.createUser,
          {
            name: `${/^[\p{L}\p{N}]/u.test(name) ? name : `user ${name}`} ${id.subject.slice(-6)}`.trim(),
            org: deps.config.PARLEY_OIDC_JIT_ORG,
            email: id.email,
          },
          { tracer: deps.tracer },
        );
        user = created.user.id;
        await audit('oidc.jit', SELF, user, { issuer: id.issuer, email: id.email });
        log.info({ user, email: id.email }, 'user created at first sign-in');
      }
    }
    if (!user) {
      throw new ParleyError(
        'UNAUTHENTICATED',
        id.email
          ? 'no Parley user has this verified email, and its domain is not open for sign-up'
          : 'the token carries no verified email and its subject is not linked to a Parley user',
      );
    }
    await kv().put(link, user);
    return user;
  }

  async function oidcOf(bearer: string): Promise<Principal> {
    if (!oidc)
      throw new ParleyError('UNAUTHENTICATED', 'unknown bearer credential (OIDC sign-in is not configured)');
    const cacheKey = sha256(bearer);
    const cached = signedIn.get(cacheKey);
    if (cached) return cached;
    const id = await oidc.verify(bearer);
    const principal: Principal = { participant: await userOf(id), via: 'oidc', scopes: ALL_SCOPES };
    signedIn.set(cacheKey, principal, { ttl: Math.max(1, id.expiresAt * 1000 - Date.now()) });
    return principal;
  }

  return {
    name: 'gateway',
    pool,
    outbound,
    nc: deps.nc,
    responder: deps.responder ?? deps.nc,
    standing: () => {
      if (!standingView)
        throw new ParleyError('UNAVAILABLE', 'the gateway is not started', { retryAfterMs: 1000 });
      return standingView;
    },
    config: deps.config,
    log,
    kv,
    ready: () => started,

    async authenticate(bearer) {
      const principal = bearer.startsWith('pak_')
        ? keyOf(bearer)
        : bearer.startsWith('ses_')
          ? await sessionOf(bearer)
          : await oidcOf(bearer);
      if (revoked.has(principal.participant)) {
        throw new ParleyError('REVOKED', `${principal.participant} was revoked`);
      }
      return principal;
    },

    async createLoginCode(participant) {
      const code = mintBearer('session').token.split('.')[1] as string;
      const expiresAt = new Date(Date.now() + LOGIN_MINUTES * 60_000).toISOString();
      await kv().put(gatewayKeys.login(sha256(code)), JSON.stringify({ participant, expiresAt }));
      return code;
    },

    async redeemLoginCode(code) {
      const key = gatewayKeys.login(sha256(code));
      const found = /^[A-Za-z0-9_-]{43}$/.test(code) ? await readJson(LoginRecord, key) : undefined;
      if (!found) throw new ParleyError('UNAUTHENTICATED', 'unknown or already used login link');
      // Once: only the writer whose delete matches the revision it read wins.
      await kv()
        .delete(key, { previousSeq: found.revision })
        .catch(() => {
          throw new ParleyError('UNAUTHENTICATED', 'unknown or already used login link');
        });
      if (Date.parse(found.value.expiresAt) <= Date.now())
        throw new ParleyError('EXPIRED', 'the login link expired');
      const minted = mintBearer('session');
      const now = new Date();
      const record: SessionRecord = {
        id: minted.id,
        participant: found.value.participant,
        secretSha256: minted.secretSha256,
        createdAt: now.toISOString(),
        expiresAt: new Date(now.getTime() + SESSION_HOURS * 3_600_000).toISOString(),
      };
      await kv().create(gatewayKeys.session(minted.id), JSON.stringify(record));
      await audit('session.login', found.value.participant, found.value.participant, { session: minted.id });
      return { token: minted.token, participant: record.participant, expiresAt: record.expiresAt };
    },

    async hook(id) {
      return (await readJson(HookRecord, gatewayKeys.hook(id)))?.value;
    },

    async start() {
      const kvm = startKvm(deps.nc, { log });
      bucket = await kvm.open(buckets.gateway);
      const watch = await watchKv(bucket, {
        key: gatewayKeys.apiKey('>'),
        onEntry: (e) => {
          const id = e.key.slice('key.'.length);
          if (e.operation !== 'PUT') keys.delete(id);
          else keys.set(id, ApiKeyRecord.parse(e.json()));
        },
        onError: (err) => log.warn({ err }, 'API key watch failed'),
        log,
      });
      await watch.initialized;
      const policyKv = await kvm.open(buckets.policy);
      const policyWatch = await watchKv(policyKv, {
        key: policyKeys.participant('>'),
        onEntry: (e) => {
          const id = e.key.slice(policyKeys.participant('').length);
          // The one strict reader of standing records (a malformed one reads as suspended, not revoked).
          if (e.operation === 'PUT' && readStanding(e.value).standing.status === 'revoked') {
            revoked.add(id);
            void pool.drop(id);
          } else revoked.delete(id);
        },
        onError: (err) => log.warn({ err }, 'policy watch failed'),
        log,
      });
      await policyWatch.initialized;
      // Standing for serveApis: a suspended participant's writes (keys, hooks) are refused here too.
      const standing = await createStandingView(policyKv, { log, metrics: deps.metrics });
      standingView = standing;
      stopWatch = () => {
        watch.stop();
        policyWatch.stop();
        standing.stop();
      };
      micro = createMicroService(deps.responder ?? deps.nc, {
        name: 'parley-gateway',
        version: packageVersion(import.meta.url),
        description: 'The edge: API keys, inbound and outbound webhooks.',
      });
      serveApis(
        micro,
        [
          bind(gatewayApi.createKey, async (req, ctx) => {
            await checkManage(ctx.caller, req.agent);
            const minted = mintBearer('apiKey');
            const now = new Date();
            const record = ApiKeyRecord.parse({
              id: minted.id,
              agent: req.agent,
              label: req.label,
              scopes: [...new Set(req.scopes)],
              secretSha256: minted.secretSha256,
              createdBy: ctx.caller,
              createdAt: now.toISOString(),
              ...(req.ttlDays
                ? { expiresAt: new Date(now.getTime() + req.ttlDays * 86_400_000).toISOString() }
                : {}),
            });
            await kv().create(gatewayKeys.apiKey(record.id), JSON.stringify(record));
            keys.set(record.id, record);
            await audit('api_key.create', ctx.caller, req.agent, { key: record.id, scopes: record.scopes });
            const { secretSha256: _, ...info } = record;
            return { key: minted.token, info };
          }),
          bind(gatewayApi.listKeys, async (req, ctx) => {
            await checkManage(ctx.caller, req.agent);
            return {
              keys: [...keys.values()]
                .filter((k) => k.agent === req.agent)
                .sort((a, b) => a.createdAt.localeCompare(b.createdAt))
                .map(({ secretSha256: _, ...info }) => info),
            };
          }),
          bind(gatewayApi.revokeKey, async (req, ctx) => {
            const found = await readJson(ApiKeyRecord, gatewayKeys.apiKey(req.id));
            if (!found) throw new ParleyError('NOT_FOUND', `no API key ${req.id}`);
            await checkManage(ctx.caller, found.value.agent);
            if (found.value.revokedAt) return { id: req.id, revoked: false };
            const record = { ...found.value, revokedAt: new Date().toISOString() };
            await kv().update(gatewayKeys.apiKey(req.id), JSON.stringify(record), found.revision);
            keys.set(req.id, record);
            await audit('api_key.revoke', ctx.caller, record.agent, { key: req.id });
            return { id: req.id, revoked: true };
          }),
          bind(gatewayApi.createHook, async (req, ctx) => {
            await checkManage(ctx.caller, req.agent);
            // The hook speaks as the bridge agent: the room (or the direct room with the participant)
            // is checked or made with the agent's own rights, so a hook reaches nowhere its agent cannot.
            const held = await pool.acquire(req.agent);
            let room: string;
            try {
              if (req.room) {
                await held.agent.call(roomsApi.get, { room: req.room });
                room = req.room;
              } else {
                const created = await held.agent.rooms.create(`hook ${req.label || req.agent}`, {
                  members: [req.participant as string],
                  direct: true,
                });
                room = created.id;
              }
            } finally {
              held.release();
            }
            const record = HookRecord.parse({
              id: newId('hook'),
              agent: req.agent,
              room,
              ...(req.participant ? { participant: req.participant } : {}),
              ...(req.template !== undefined ? { template: req.template } : {}),
              includeData: req.includeData,
              label: req.label,
              createdBy: ctx.caller,
              createdAt: new Date().toISOString(),
              secret: mintWebhookSecret(),
            });
            await kv().create(gatewayKeys.hook(record.id), JSON.stringify(record));
            await audit('hook.create', ctx.caller, req.agent, { hook: record.id, room });
            const { secret, ...info } = record;
            return { info, secret, path: `/v1/hooks/${record.id}` };
          }),
          bind(gatewayApi.listHooks, async (req, ctx) => {
            await checkManage(ctx.caller, req.agent);
            const all = await snapshotKv(kv(), gatewayKeys.hook('*'));
            return {
              hooks: [...all.values()]
                .map((e) => HookRecord.parse(e.json()))
                .filter((h) => h.agent === req.agent)
                .sort((a, b) => a.createdAt.localeCompare(b.createdAt))
                .map(({ secret: _, ...info }) => info),
            };
          }),
          bind(gatewayApi.rotateHookSecret, async (req, ctx) => {
            const found = await readJson(HookRecord, gatewayKeys.hook(req.id));
            if (!found) throw new ParleyError('NOT_FOUND', `no hook ${req.id}`);
            await checkManage(ctx.caller, found.value.agent);
            const record = { ...found.value, secret: mintWebhookSecret() };
            await kv().update(gatewayKeys.hook(req.id), JSON.stringify(record), found.revision);
            await audit('hook.rotate', ctx.caller, record.agent, { hook: req.id });
            const { secret, ...info } = record;
            return { info, secret };
          }),
          bind(gatewayApi.deleteHook, async (req, ctx) => {
            const found = await readJson(HookRecord, gatewayKeys.hook(req.id));
            if (!found) return { id: req.id, deleted: false };
            await checkManage(ctx.caller, found.value.agent);
            await kv().delete(gatewayKeys.hook(req.id));
            await audit('hook.delete', ctx.caller, found.value.agent, { hook: req.id });
            return { id: req.id, deleted: true };
          }),
          ...outbound.bindings(checkManage, audit),
        ],
        { service: 'gateway', queue: 'gateway', log, tracer: deps.tracer, metrics: deps.metrics, standing },
      );
      await outbound.start();
      started = true;
    },

    async stop() {
      started = false;
      await outbound.stop();
      await micro?.stop();
      stopWatch?.();
      await pool.close();
    },
  };
}
