import { type JetStreamManager, jetstreamManager } from '@nats-io/jetstream';
import { type KV, type KvEntry, Kvm } from '@nats-io/kv';
import type { Msg, NatsConnection } from '@nats-io/transport-node';
import {
  type AgentListing,
  type BackboneOptions,
  buckets,
  decodeJson,
  encodeJson,
  governanceApi,
  Human,
  type Human as HumanT,
  isParticipantId,
  isServiceId,
  newId,
  Org,
  type Org as OrgT,
  ParleyError,
  type ParticipantInfo,
  PresenceHeartbeat,
  type PrincipalId,
  registryApi,
  request,
  serviceId,
  subjects,
  type WhoAmI,
} from '@parley/contracts';
import {
  bind,
  claimName,
  createMicroService,
  createStandingView,
  deleteInboxConsumer,
  ensureInboxConsumer,
  isKvConflict,
  type KvWatch,
  type Logger,
  nameKey,
  type ParleyService,
  packageVersion,
  publishEvent,
  registryKeys,
  releaseName,
  respondError,
  respondTo,
  type ServiceResponder,
  type ServiceTelemetry,
  type StandingView,
  seedRegistry,
  serveApis,
  toParleyError,
  watchKv,
} from '@parley/kit';
import { canManage, canSee, canSeeHuman, canUpdateCard, isAdminOf, seesAll, type Viewer } from './access.js';
import { type AgentDoc, Catalog, type StoredAgent } from './catalog.js';
import { discover, listAgents } from './discovery.js';
import { createPresence, type PresenceTracker } from './presence.js';

export { registryKeys } from '@parley/kit';

/** What the registry needs. */
export interface RegistryDeps extends ServiceTelemetry, ServiceResponder {
  nc: NatsConnection;
  log: Logger;
  /** Settings of the inbox consumers it creates. */
  backbone?: BackboneOptions;
}

const SELF = serviceId('registry');
/** Largest heartbeat accepted, in bytes. */
const MAX_HEARTBEAT_BYTES = 1024;
/** Creating a participant waits this long for governance to mint its creds. */
const GOVERNANCE_TIMEOUT_MS = 10_000;

function entry(key: string, revision: number, value: unknown): KvEntry {
  return { key, revision, operation: 'PUT', json: () => value } as unknown as KvEntry;
}

const notFound = (id: string) => new ParleyError('NOT_FOUND', `${id} does not exist`);

/** The registry service: orgs, humans, agents and their cards, discovery, presence. */
export function createRegistryService(deps: RegistryDeps): ParleyService & {
  /** Creates the org and the superadmin of a fresh installation (and the admin's inbox) if absent. */
  seed(input: { org: { id: string; name: string }; admin: { id: string; name: string } }): Promise<void>;
} {
  const log = deps.log.child({ component: 'registry' });
  const { nc } = deps;
  const catalog = new Catalog();
  let kv: KV | undefined;
  let jsm: JetStreamManager | undefined;
  let presence: PresenceTracker | undefined;
  let micro: ReturnType<typeof createMicroService> | undefined;
  let standing: StandingView | undefined;
  const watches: KvWatch[] = [];
  let started = false;

  const store = () => {
    if (!kv || !jsm || !presence) throw new ParleyError('UNAVAILABLE', 'registry is not started');
    return { kv, jsm, js: jsm.jetstream(), presence };
  };

  // ---- reading, with a read-through for what this replica's watch has not delivered yet ----

  async function readThrough(key: string): Promise<void> {
    const e = await store().kv.get(key);
    if (e) catalog.applyRegistryEntry(e);
  }

  async function loadUser(id: string): Promise<HumanT | undefined> {
    if (!catalog.users.has(id)) await readThrough(registryKeys.user(id));
    return catalog.users.get(id)?.user;
  }

  async function loadAgent(id: string): Promise<AgentDoc | undefined> {
    if (!catalog.agents.has(id)) await readThrough(registryKeys.agent(id));
    return catalog.agents.get(id);
  }

  async function loadOrg(id: string): Promise<OrgT | undefined> {
    if (!catalog.orgs.has(id)) await readThrough(registryKeys.org(id));
    return catalog.orgs.get(id)?.org;
  }

  async function viewerOf(caller: string): Promise<Viewer> {
    if (isServiceId(caller)) return { kind: 'service', id: caller };
    if (caller.startsWith('usr_')) {
      const u = await loadUser(caller);
      if (u) return { kind: 'human', id: u.id, org: u.org, role: u.role, superadmin: u.superadmin };
    } else if (caller.startsWith('agt_')) {
      const a = await loadAgent(caller);
      if (a) return { kind: 'agent', id: a.stored.id, org: a.stored.org, owner: a.stored.owner };
    }
    throw new ParleyError('UNAUTHENTICATED', `${caller} is not registered`);
  }

  /** An agent the viewer may see, or NOT_FOUND exactly as if it did not exist. */
  async function visibleAgent(v: Viewer, id: string): Promise<AgentDoc> {
    const doc = await loadAgent(id);
    if (!doc || !canSee(v, doc.stored)) throw notFound(id);
    return doc;
  }

  const listing = (doc: AgentDoc): AgentListing => ({
    agent: catalog.agentRecord(doc),
    presence: store().presence.get(doc.stored.id),
  });

  // ---- participants: inbox consumer + creds, undone when a later step fails ----

  async function provisionParticipant(id: string, claimKey: string, write: () => Promise<void>) {
    const { kv, jsm } = store();
    let consumer = false;
    let creds = false;
    try {
      await ensureInboxConsumer(jsm, id, deps.backbone);
      consumer = true;
      const credentials = await request(
        nc,
        SELF,
        governanceApi.issueCredentials,
        { participant: id },
        { timeout: GOVERNANCE_TIMEOUT_MS, tracer: deps.tracer },
      );
      creds = true;
      await write();
      return credentials;
    } catch (err) {
      log.warn({ err, participant: id }, 'creating a participant failed; undoing');
      if (creds) {
        await request(
          nc,
          SELF,
          governanceApi.revokeCredentials,
          { participant: id, reason: 'creation failed' },
          { tracer: deps.tracer },
        ).catch(() => undefined);
      }
      if (consumer) await deleteInboxConsumer(jsm, id).catch(() => undefined);
      await releaseName(kv, claimKey).catch(() => undefined);
      throw err;
    }
  }

  async function event(kind: string, actor: string, subject: string, data: Record<string, unknown> = {}) {
    await publishEvent(store().js, 'registry', kind, { actor, subject, data });
  }

  // ---- presence heartbeats ----

  const heartbeatQueues = new Map<string, Promise<void>>();

  function onHeartbeat(msg: Msg): void {
    let caller: string;
    try {
      caller = msg.subject.split('.')[2] ?? '';
      if (!isParticipantId(caller)) return;
    } catch {
      return;
    }
    // One participant's heartbeats are handled in order, so a change is judged against the last one.
    const prev = heartbeatQueues.get(caller) ?? Promise.resolve();
    const next = prev.then(async () => {
      try {
        const hb = decodeJson(PresenceHeartbeat, msg.data, {
          maxBytes: MAX_HEARTBEAT_BYTES,
          what: 'heartbeat',
        });
        const known = caller.startsWith('usr_') ? await loadUser(caller) : await loadAgent(caller);
        if (!known) throw new ParleyError('UNAUTHENTICATED', `${caller} is not registered`);
        await store().presence.heartbeat(caller as PrincipalId, hb);
        respondTo(msg, encodeJson({ ok: true }), { watch: { log, metrics: deps.metrics } });
      } catch (err) {
        const e = toParleyError(err, log);
        log.debug({ participant: caller, code: e.code }, 'heartbeat refused');
        respondError(msg, e, { log, metrics: deps.metrics });
      }
    });
    heartbeatQueues.set(caller, next);
    void next.finally(() => {
      if (heartbeatQueues.get(caller) === next) heartbeatQueues.delete(caller);
    });
  }

  // ---- the API ----

  const handlers = [
    bind(registryApi.whoami, async (_req, ctx): Promise<WhoAmI> => {
      const v = await viewerOf(ctx.caller).catch(() => {
        throw new ParleyError('NOT_FOUND', `${ctx.caller} is not registered`);
      });
      if (v.kind === 'service') return { id: v.id as PrincipalId, kind: 'service' };
      if (v.kind === 'human') {
        const u = catalog.users.get(v.id)?.user as HumanT;
        return { id: u.id, kind: 'human', name: u.name, org: u.org, role: u.role, superadmin: u.superadmin };
      }
      const a = catalog.agents.get(v.id) as AgentDoc;
      return {
        id: a.stored.id,
        kind: 'agent',
        name: a.stored.card.name,
        org: a.stored.org,
        owner: a.stored.owner,
      };
    }),

    bind(registryApi.createOrg, async (req, ctx) => {
      const v = await viewerOf(ctx.caller);
      if (!seesAll(v))
        throw new ParleyError('PERMISSION_DENIED', 'only the superadmin may create organisations');
      const id = newId('org');
      const claim = nameKey('org', '_', req.name);
      await claimName(store().kv, claim, id, `organisation name "${req.name}"`);
      const org = Org.parse({ id, name: req.name, createdAt: new Date().toISOString() });
      try {
        const rev = await store().kv.create(registryKeys.org(id), JSON.stringify(org));
        catalog.applyRegistryEntry(entry(registryKeys.org(id), rev, org));
      } catch (err) {
        await releaseName(store().kv, claim).catch(() => undefined);
        throw err;
      }
      await event('org.created', ctx.caller, id, { name: org.name });
      return org;
    }),

    bind(registryApi.listOrgs, async (_req, ctx) => {
      const v = await viewerOf(ctx.caller);
      const orgs = [...catalog.orgs.values()]
        .map((o) => o.org)
        .filter((o) => seesAll(v) || (v.kind !== 'service' && o.id === v.org))
        .sort((a, b) => (a.id < b.id ? -1 : 1));
      return { orgs };
    }),

    bind(registryApi.createUser, async (req, ctx) => {
      const v = await viewerOf(ctx.caller);
      const org = await loadOrg(req.org);
      if (!org || (!seesAll(v) && v.kind !== 'service' && v.org !== req.org)) throw notFound(req.org);
      if (!isAdminOf(v, req.org)) {
        throw new ParleyError('PERMISSION_DENIED', 'only an admin of the organisation may add people to it');
      }
      const id = newId('user');
      const claim = nameKey('user', req.org, req.name);
      await claimName(store().kv, claim, id, `name "${req.name}" in this organisation`);
      const user = Human.parse({
        id,
        org: req.org,
        name: req.name,
        role: req.role,
        superadmin: false,
        createdAt: new Date().toISOString(),
        ...(req.email ? { email: req.email } : {}),
      });
      const credentials = await provisionParticipant(id, claim, async () => {
        const rev = await store().kv.create(registryKeys.user(id), JSON.stringify(user));
        catalog.applyRegistryEntry(entry(registryKeys.user(id), rev, user));
      });
      await event('user.created', ctx.caller, id, { org: req.org, role: req.role });
      return { user, credentials };
    }),

    bind(registryApi.listUsers, async (req, ctx) => {
      const v = await viewerOf(ctx.caller);
      const org = req.org ?? (v.kind === 'human' ? v.org : undefined);
      if (!org) throw new ParleyError('INVALID_ARGUMENT', 'org is required');
      if (!(await loadOrg(org)) || !canSeeHuman(v, { org })) throw notFound(org);
      const users = [...(catalog.usersByOrg.get(org) ?? [])]
        .map((id) => catalog.users.get(id)?.user)
        .filter((u): u is NonNullable<typeof u> => u !== undefined)
        .sort((a, b) => a.name.localeCompare(b.name) || (a.id < b.id ? -1 : 1));
      return { users };
    }),
    bind(registryApi.findUser, async (req) => {
      // Services only (checked by the access rule); a linear scan of the cached catalog is fine at
      // the gateway's rate: sign-ins are cached there per token.
      const email = req.email.toLowerCase();
      for (const { user } of catalog.users.values()) if (user.email?.toLowerCase() === email) return user;
      throw new ParleyError('NOT_FOUND', 'no user with this email address');
    }),

    bind(registryApi.getUser, async (req, ctx) => {
      const v = await viewerOf(ctx.caller);
      const u = await loadUser(req.user);
      if (!u || !canSeeHuman(v, u)) throw notFound(req.user);
      return u;
    }),

    bind(registryApi.createAgent, async (req, ctx) => {
      const v = await viewerOf(ctx.caller);
      const ownerId = req.owner ?? (v.kind === 'human' ? v.id : undefined);
      if (!ownerId) throw new ParleyError('INVALID_ARGUMENT', 'owner is required');
      const owner = await loadUser(ownerId);
      if (!owner || !canSeeHuman(v, owner)) throw notFound(ownerId);
      if (v.id !== owner.id && !isAdminOf(v, owner.org)) {
        throw new ParleyError(
          'PERMISSION_DENIED',
          'only an admin of the org may create agents for someone else',
        );
      }
      const id = newId('agent');
      const claim = nameKey('agent', owner.org, req.card.name);
      await claimName(store().kv, claim, id, `agent name "${req.card.name}" in this organisation`);
      const now = new Date().toISOString();
      const stored: StoredAgent = {
        id,
        owner: owner.id,
        org: owner.org,
        card: req.card,
        createdAt: now,
        updatedAt: now,
      };
      const credentials = await provisionParticipant(id, claim, async () => {
        const rev = await store().kv.create(registryKeys.agent(id), JSON.stringify(stored));
        catalog.applyRegistryEntry(entry(registryKeys.agent(id), rev, stored));
      });
      await event('agent.created', ctx.caller, id, { owner: owner.id, org: owner.org, name: req.card.name });
      return { agent: catalog.agentRecord(catalog.agents.get(id) as AgentDoc), credentials };
    }),

    bind(registryApi.getAgent, async (req, ctx) => {
      const v = await viewerOf(ctx.caller);
      return listing(await visibleAgent(v, req.agent));
    }),

    bind(registryApi.updateAgent, async (req, ctx) => {
      const v = await viewerOf(ctx.caller);
      const doc = await visibleAgent(v, req.agent);
      if (!canUpdateCard(v, doc.stored)) {
        throw new ParleyError('PERMISSION_DENIED', 'only the agent’s owner may change its card');
      }
      const { kv } = store();
      const oldClaim = nameKey('agent', doc.stored.org, doc.stored.card.name);
      const newClaim = nameKey('agent', doc.stored.org, req.card.name);
      const renamed = oldClaim !== newClaim;
      if (renamed)
        await claimName(kv, newClaim, req.agent, `agent name "${req.card.name}" in this organisation`);
      const stored: StoredAgent = { ...doc.stored, card: req.card, updatedAt: new Date().toISOString() };
      let rev: number;
      try {
        rev = await kv.update(registryKeys.agent(req.agent), JSON.stringify(stored), req.revision);
      } catch (err) {
        if (renamed) await releaseName(kv, newClaim).catch(() => undefined);
        if (!isKvConflict(err)) throw err;
        await readThrough(registryKeys.agent(req.agent));
        const current = catalog.agents.get(req.agent)?.revision;
        throw new ParleyError(
          'CONFLICT',
          `revision ${req.revision} is stale${current ? `; the current revision is ${current}` : ''}: read the agent again and retry`,
          { details: { revision: req.revision, ...(current ? { current } : {}) } },
        );
      }
      if (renamed) await releaseName(kv, oldClaim).catch(() => undefined);
      catalog.applyRegistryEntry(entry(registryKeys.agent(req.agent), rev, stored));
      await event('agent.updated', ctx.caller, req.agent, { revision: rev });
      return catalog.agentRecord(catalog.agents.get(req.agent) as AgentDoc);
    }),

    bind(registryApi.deregisterAgent, async (req, ctx) => {
      const v = await viewerOf(ctx.caller);
      const doc = await visibleAgent(v, req.agent);
      if (!canManage(v, doc.stored)) {
        throw new ParleyError('PERMISSION_DENIED', 'only the agent’s owner or an org admin may remove it');
      }
      const { kv, jsm, presence } = store();
      // Credentials first: from here on it can neither connect nor act.
      await request(
        nc,
        SELF,
        governanceApi.revokeCredentials,
        { participant: req.agent, reason: 'deregistered' },
        { timeout: GOVERNANCE_TIMEOUT_MS, tracer: deps.tracer },
      );
      await deleteInboxConsumer(jsm, req.agent);
      await kv.delete(registryKeys.agent(req.agent));
      catalog.forgetAgent(req.agent);
      await releaseName(kv, nameKey('agent', doc.stored.org, doc.stored.card.name));
      await presence.remove(req.agent);
      await event('agent.deregistered', ctx.caller, req.agent, { owner: doc.stored.owner });
      return { agent: req.agent };
    }),

    bind(registryApi.listAgents, async (req, ctx) => {
      const v = await viewerOf(ctx.caller);
      const page = listAgents(catalog, v, req);
      return { agents: page.docs.map(listing), ...(page.next ? { next: page.next } : {}) };
    }),

    bind(registryApi.discover, async (req, ctx) => {
      const v = await viewerOf(ctx.caller);
      const page = discover(catalog, v, req);
      return { agents: page.docs.map(listing), ...(page.next ? { next: page.next } : {}) };
    }),

    bind(registryApi.checkManage, async (req): Promise<ParticipantInfo> => {
      const v = await viewerOf(req.actor).catch(() => {
        throw notFound(req.participant);
      });
      if (req.participant.startsWith('agt_')) {
        const doc = await visibleAgent(v, req.participant);
        if (!canManage(v, doc.stored)) {
          throw new ParleyError(
            'PERMISSION_DENIED',
            'only the agent’s owner or an admin of its org may do this',
          );
        }
        const a = doc.stored;
        return { id: a.id, kind: 'agent', name: a.card.name, org: a.org, owner: a.owner };
      }
      const u = await loadUser(req.participant);
      if (!u || !canSeeHuman(v, u)) throw notFound(req.participant);
      if (v.id !== u.id && !isAdminOf(v, u.org)) {
        throw new ParleyError('PERMISSION_DENIED', 'only the person or an admin of their org may do this');
      }
      return { id: u.id, kind: 'human', name: u.name, org: u.org, role: u.role };
    }),

    bind(registryApi.describeParticipant, async (req, ctx): Promise<ParticipantInfo> => {
      const v = await viewerOf(req.viewer ?? ctx.caller).catch(() => {
        throw notFound(req.participant);
      });
      if (req.participant.startsWith('agt_')) {
        const a = (await visibleAgent(v, req.participant)).stored;
        return { id: a.id, kind: 'agent', name: a.card.name, org: a.org, owner: a.owner };
      }
      const u = await loadUser(req.participant);
      if (!u || !canSeeHuman(v, u)) throw notFound(req.participant);
      return { id: u.id, kind: 'human', name: u.name, org: u.org, role: u.role };
    }),

    bind(registryApi.presence, async (req, ctx) => {
      const v = await viewerOf(ctx.caller);
      const out: Record<string, ReturnType<PresenceTracker['get']>> = {};
      for (const id of req.participants) {
        if (id.startsWith('agt_')) {
          const doc = await loadAgent(id);
          if (doc && canSee(v, doc.stored)) out[id] = store().presence.get(id);
        } else {
          const u = await loadUser(id);
          if (u && canSeeHuman(v, u)) out[id] = store().presence.get(id);
        }
      }
      return { presence: out };
    }),
  ];

  return {
    name: 'registry',
    async start() {
      const kvm = new Kvm(nc);
      kv = await kvm.open(buckets.agents);
      const presenceKv = await kvm.open(buckets.presence);
      const policyKv = await kvm.open(buckets.policy);
      jsm = await jetstreamManager(nc);
      const ttlMs = (await presenceKv.status()).ttl || 30_000;
      presence = createPresence({
        kv: presenceKv,
        js: jsm.jetstream(),
        log,
        ttlMs,
        ownerOf: (id) => catalog.agents.get(id)?.stored.owner,
      });
      const onError = (err: unknown, e: KvEntry) =>
        log.warn({ err, key: e.key }, 'unreadable KV entry skipped');
      watches.push(
        await watchKv(kv, { onEntry: (e) => catalog.applyRegistryEntry(e), onError }),
        await watchKv(policyKv, {
          key: 'participant.>',
          onEntry: (e) => catalog.applyPolicyEntry(e),
          onError,
        }),
        await watchKv(presenceKv, { onEntry: (e) => presence?.applyEntry(e), onError }),
      );
      await Promise.all(watches.map((w) => w.initialized));
      presence.start();
      micro = createMicroService(deps.responder ?? nc, {
        name: 'parley-registry',
        version: packageVersion(import.meta.url),
        description: 'Orgs, humans, agents with cards, discovery and presence.',
      });
      micro.subscribe(subjects.presenceListen(), 'registry', onHeartbeat);
      standing = await createStandingView(policyKv, { log, metrics: deps.metrics });
      serveApis(micro, handlers, {
        service: 'registry',
        queue: 'registry',
        standing,
        log,
        tracer: deps.tracer,
        metrics: deps.metrics,
      });
      started = true;
      log.info(
        { orgs: catalog.orgs.size, users: catalog.users.size, agents: catalog.agents.size },
        'registry started',
      );
    },
    async stop() {
      started = false;
      presence?.stop();
      await micro?.stop();
      for (const w of watches.splice(0)) w.stop();
      standing?.stop();
    },
    ready: () => started,
    async seed({ org, admin }) {
      const { kv, jsm } = store();
      for (const r of await seedRegistry({ kv, jsm, org, admin, backbone: deps.backbone }))
        catalog.applyRegistryEntry(entry(r.key, r.revision, r.value));
    },
  };
}
