/**
 * The registry service: orgs, humans, agents and their cards, discovery, presence. This file holds
 * start/stop and which handler serves which method; the handlers are in `handlers/` (one file a
 * group), their shared state and helpers in `state.ts`.
 */
import type { KvEntry } from '@nats-io/kv';
import type { Msg, NatsConnection } from '@nats-io/transport-node';
import {
  type BackboneOptions,
  buckets,
  decodeJson,
  encodeJson,
  isParticipantId,
  ParleyError,
  PresenceHeartbeat,
  type PrincipalId,
  registryApi,
  subjects,
} from '@parley/contracts';
import {
  bind,
  createMicroService,
  createStandingView,
  jetstreamManagerReady,
  type KvWatch,
  type Logger,
  type ParleyService,
  packageVersion,
  respondError,
  respondTo,
  type ServiceResponder,
  type ServiceTelemetry,
  type StandingView,
  seedRegistry,
  serveApis,
  startKvm,
  toParleyError,
  watchKv,
} from '@parley/kit';
import * as agents from './handlers/agents.js';
import * as orgs from './handlers/orgs.js';
import * as participants from './handlers/participants.js';
import * as users from './handlers/users.js';
import { createPresence, type PresenceTracker } from './presence.js';
import { createRegistryState, entry } from './state.js';

export { registryKeys } from '@parley/kit';

/** What the registry needs. */
export interface RegistryDeps extends ServiceTelemetry, ServiceResponder {
  nc: NatsConnection;
  log: Logger;
  /** Settings of the inbox consumers it creates. */
  backbone?: BackboneOptions;
}

/** Largest heartbeat accepted, in bytes. */
const MAX_HEARTBEAT_BYTES = 1024;

/** The registry service: orgs, humans, agents and their cards, discovery, presence. */
export function createRegistryService(deps: RegistryDeps): ParleyService & {
  /** Creates the org and the superadmin of a fresh installation (and the admin's inbox) if absent. */
  seed(input: { org: { id: string; name: string }; admin: { id: string; name: string } }): Promise<void>;
} {
  const log = deps.log.child({ component: 'registry' });
  const { nc } = deps;
  const r = createRegistryState(deps, log);
  let presence: PresenceTracker | undefined;
  let micro: ReturnType<typeof createMicroService> | undefined;
  let standing: StandingView | undefined;
  const watches: KvWatch[] = [];
  let started = false;

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
        const known = caller.startsWith('usr_') ? await r.loadUser(caller) : await r.loadAgent(caller);
        if (!known) throw new ParleyError('UNAUTHENTICATED', `${caller} is not registered`);
        await r.store().presence.heartbeat(caller as PrincipalId, hb);
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

  // ---- the API: which handler serves which method ----

  const handlers = [
    bind(registryApi.whoami, (req, ctx) => orgs.whoami(req, ctx, r)),
    bind(registryApi.createOrg, (req, ctx) => orgs.createOrg(req, ctx, r)),
    bind(registryApi.listOrgs, (req, ctx) => orgs.listOrgs(req, ctx, r)),
    bind(registryApi.createUser, (req, ctx) => users.createUser(req, ctx, r)),
    bind(registryApi.listUsers, (req, ctx) => users.listUsers(req, ctx, r)),
    bind(registryApi.findUser, (req, ctx) => users.findUser(req, ctx, r)),
    bind(registryApi.getUser, (req, ctx) => users.getUser(req, ctx, r)),
    bind(registryApi.createAgent, (req, ctx) => agents.createAgent(req, ctx, r)),
    bind(registryApi.getAgent, (req, ctx) => agents.getAgent(req, ctx, r)),
    bind(registryApi.updateAgent, (req, ctx) => agents.updateAgent(req, ctx, r)),
    bind(registryApi.deregisterAgent, (req, ctx) => agents.deregisterAgent(req, ctx, r)),
    bind(registryApi.listAgents, (req, ctx) => agents.listAgents(req, ctx, r)),
    bind(registryApi.discover, (req, ctx) => agents.discover(req, ctx, r)),
    bind(registryApi.checkManage, (req, ctx) => participants.checkManage(req, ctx, r)),
    bind(registryApi.describeParticipant, (req, ctx) => participants.describeParticipant(req, ctx, r)),
    bind(registryApi.presence, (req, ctx) => participants.presence(req, ctx, r)),
  ];

  return {
    name: 'registry',
    async start() {
      const kvm = startKvm(nc, { log });
      const kv = await kvm.open(buckets.agents);
      const presenceKv = await kvm.open(buckets.presence);
      const policyKv = await kvm.open(buckets.policy);
      const jsm = await jetstreamManagerReady(nc, { log });
      const ttlMs = (await presenceKv.status()).ttl || 30_000;
      const tracker = createPresence({
        kv: presenceKv,
        js: jsm.jetstream(),
        log,
        ttlMs,
        ownerOf: (id) => r.catalog.agents.get(id)?.stored.owner,
      });
      const onError = (err: unknown, e: KvEntry) =>
        log.warn({ err, key: e.key }, 'unreadable KV entry skipped');
      watches.push(
        await watchKv(kv, { onEntry: (e) => r.catalog.applyRegistryEntry(e), onError }),
        await watchKv(policyKv, {
          key: 'participant.>',
          onEntry: (e) => r.catalog.applyPolicyEntry(e),
          onError,
        }),
        await watchKv(presenceKv, { onEntry: (e) => tracker.applyEntry(e), onError }),
      );
      presence = tracker;
      r.open({ kv, jsm, presence: tracker });
      await Promise.all(watches.map((w) => w.initialized));
      tracker.start();
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
        { orgs: r.catalog.orgs.size, users: r.catalog.users.size, agents: r.catalog.agents.size },
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
      const { kv, jsm } = r.store();
      for (const s of await seedRegistry({ kv, jsm, org, admin, backbone: deps.backbone }))
        r.catalog.applyRegistryEntry(entry(s.key, s.revision, s.value));
    },
  };
}
