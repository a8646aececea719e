/**
 * What the registry's handlers share: the in-memory catalog, the buckets once started, and the
 * reads and writes every group of handlers uses (viewer, visibility, provisioning, events).
 */
import type { JetStreamManager } from '@nats-io/jetstream';
import type { KV, KvEntry } from '@nats-io/kv';
import {
  type AgentListing,
  governanceApi,
  type Human as HumanT,
  isServiceId,
  type Org as OrgT,
  ParleyError,
  request,
  serviceId,
} from '@parley/contracts';
import {
  deleteInboxConsumer,
  ensureInboxConsumer,
  type Logger,
  publishEvent,
  registryKeys,
  releaseName,
} from '@parley/kit';
import { canSee, type Viewer } from './access.js';
import { type AgentDoc, Catalog } from './catalog.js';
import type { PresenceTracker } from './presence.js';
import type { RegistryDeps } from './service.js';

/** The registry's own service id (its calls to governance). */
export const SELF = serviceId('registry');
/** Creating a participant waits this long for governance to mint its creds. */
export const GOVERNANCE_TIMEOUT_MS = 10_000;

/** A KV entry for a record this replica just wrote (applied to the catalog at once). */
export function entry(key: string, revision: number, value: unknown): KvEntry {
  return { key, revision, operation: 'PUT', json: () => value } as unknown as KvEntry;
}

/** NOT_FOUND for an id, the same whether it does not exist or the caller may not see it. */
export const notFound = (id: string) => new ParleyError('NOT_FOUND', `${id} does not exist`);

/** The registry's shared state and helpers; see {@link createRegistryState}. */
export type RegistryState = ReturnType<typeof createRegistryState>;

/** Builds the state the handlers share; `open` is called by `start()` with the buckets. */
export function createRegistryState(deps: RegistryDeps, log: Logger) {
  const { nc } = deps;
  const catalog = new Catalog();
  let kv: KV | undefined;
  let jsm: JetStreamManager | undefined;
  let presence: PresenceTracker | undefined;

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

  return {
    deps,
    log,
    catalog,
    store,
    /** Called by `start()` once the buckets are open. */
    open(o: { kv: KV; jsm: JetStreamManager; presence: PresenceTracker }) {
      kv = o.kv;
      jsm = o.jsm;
      presence = o.presence;
    },
    readThrough,
    loadUser,
    loadAgent,
    loadOrg,
    viewerOf,
    visibleAgent,
    listing,
    provisionParticipant,
    event,
  };
}
