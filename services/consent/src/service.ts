/**
 * The consent service: contact requests and their answers, contacts, blocks, consent policies of
 * agents and orgs, and the `check` the rooms service asks before anyone brings a participant of
 * another owner into a conversation. This file holds start/stop and which handler serves which
 * method; the handlers are in `handlers/` (one file a group), their shared state in `state.ts`.
 */
import type { KvEntry } from '@nats-io/kv';
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import { buckets, type ContactRequest, consentApi, losesConsumerState, subjects } from '@parley/contracts';
import {
  bind,
  createMicroService,
  createStandingView,
  jetstreamManagerReady,
  type KvWatch,
  type Logger,
  type MicroService,
  type ParleyService,
  packageVersion,
  type ServiceResponder,
  type ServiceTelemetry,
  type StandingView,
  serveApis,
  startKvm,
  watchKv,
} from '@parley/kit';
import type { ConsentConfig } from './config.js';
import * as policy from './handlers/policy.js';
import * as reads from './handlers/reads.js';
import * as relations from './handlers/relations.js';
import * as requests from './handlers/requests.js';
import { createOutbox } from './outbox.js';
import { createConsentState } from './state.js';

/** What the consent service needs. */
export interface ConsentDeps extends ServiceTelemetry, ServiceResponder {
  nc: NatsConnection;
  log: Logger;
  config: ConsentConfig;
}

/**
 * The consent service: contact requests and their answers, contacts, blocks, consent policies of
 * agents and orgs, and the `check` the rooms service asks before anyone brings a participant of
 * another owner into a conversation.
 */
export function createConsentService(deps: ConsentDeps): ParleyService {
  const log = deps.log.child({ component: 'consent' });
  const { nc, config } = deps;
  const c = createConsentState(deps, log);
  let micro: MicroService | undefined;
  let standing: StandingView | undefined;
  let watch: KvWatch | undefined;
  let sweeper: NodeJS.Timeout | undefined;
  let sweeping: Promise<void> | undefined;
  let outbox: ReturnType<typeof createOutbox> | undefined;
  let deregistrations: Subscription | undefined;
  let started = false;

  // ---- the API: which handler serves which method ----

  const handlers = [
    bind(consentApi.request, (req, ctx) => requests.request(req, ctx, c)),
    bind(consentApi.answer, (req, ctx) => requests.answer(req, ctx, c)),
    bind(consentApi.block, (req, ctx) => relations.block(req, ctx, c)),
    bind(consentApi.unblock, (req, ctx) => relations.unblock(req, ctx, c)),
    bind(consentApi.revoke, (req, ctx) => relations.revoke(req, ctx, c)),
    bind(consentApi.list, (req, ctx) => reads.list(req, ctx, c)),
    bind(consentApi.pending, (req, ctx) => reads.pending(req, ctx, c)),
    bind(consentApi.check, async (req) => c.check(req.a, req.b)),
    bind(consentApi.setPolicy, (req, ctx) => policy.setPolicy(req, ctx, c)),
  ];

  /** Turns pending requests past their expiry into `expired`, with an event each. */
  async function sweep(): Promise<void> {
    for (const [id, key] of c.view.expiredAt(Date.now())) {
      const { result } = await c.changePair<ContactRequest | undefined>(key, (current) => {
        const rec = current ? structuredClone(current) : undefined;
        const r = rec?.requests.find((x) => x.id === id);
        if (!rec || !r || r.state !== 'pending' || Date.parse(r.expiresAt) > Date.now())
          return { result: undefined };
        Object.assign(r, { state: 'expired', answeredAt: new Date().toISOString() });
        rec.updatedAt = r.answeredAt as string;
        return { next: rec, result: { ...r } };
      });
      if (result) await c.recordExpired([result]);
    }
  }

  return {
    name: 'consent',
    async start() {
      const kvm = startKvm(nc, { log });
      const kv = await kvm.open(buckets.contacts);
      const jsm = await jetstreamManagerReady(nc, { log });
      const js = jsm.jetstream();
      c.open({ kv, js });
      watch = await watchKv(kv, {
        onEntry: (e: KvEntry) => c.view.apply(e),
        onError: (err, e) => log.warn({ err, key: e.key }, 'unreadable contacts entry skipped'),
        log,
      });
      await watch.initialized;
      // A deregistered agent's owner must not be answered from the cache.
      deregistrations = nc.subscribe(subjects.event('registry', 'agent.deregistered'), {
        callback: (err, msg) => {
          if (!err) c.participants.forget(msg.json<{ subject?: string }>().subject ?? '');
        },
      });
      outbox = createOutbox({
        nc,
        js,
        jsm,
        log,
        tracer: deps.tracer,
        // Its floor recorded only where the server can lose a consumer's state.
        floors: losesConsumerState(nc.info?.version) ? await kvm.open(buckets.floors) : undefined,
      });
      await outbox.start();
      micro = createMicroService(deps.responder ?? nc, {
        name: 'parley-consent',
        version: packageVersion(import.meta.url),
        description: 'Contact requests, bilateral contacts, blocks and consent policies.',
      });
      standing = await createStandingView(await kvm.open(buckets.policy), { log, metrics: deps.metrics });
      serveApis(micro, handlers, {
        service: 'consent',
        queue: 'consent',
        standing,
        log,
        tracer: deps.tracer,
        metrics: deps.metrics,
      });
      sweeper = setInterval(() => {
        sweeping ??= sweep()
          .catch((err) => log.warn({ err }, 'expiry sweep failed; next round retries'))
          .finally(() => {
            sweeping = undefined;
          });
      }, config.CONSENT_SWEEP_MS);
      started = true;
      log.info({ ...c.view.size(), ttlMs: config.CONSENT_REQUEST_TTL_MS }, 'consent started');
    },
    async stop() {
      started = false;
      clearInterval(sweeper);
      await sweeping;
      await micro?.stop();
      await outbox?.stop();
      deregistrations?.unsubscribe();
      watch?.stop();
      standing?.stop();
    },
    ready: () => started,
  };
}
