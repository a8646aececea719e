import { type JetStreamClient, jetstreamManager } from '@nats-io/jetstream';
import { type KV, type KvEntry, Kvm } from '@nats-io/kv';
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import {
  type ApiResponse,
  activeTraceIds,
  buckets,
  type ContactRequest,
  consentApi,
  deterministicId,
  isParleyError,
  isParticipantId,
  isServiceId,
  newId,
  ParleyError,
  subjects,
} from '@parley/contracts';
import {
  appendAudit,
  bind,
  createMicroService,
  createStandingView,
  type KvWatch,
  type Logger,
  type MicroService,
  type ParleyService,
  packageVersion,
  publishEvent,
  type ServiceResponder,
  type ServiceTelemetry,
  type StandingView,
  serveApis,
  watchKv,
} from '@parley/kit';
import type { ConsentConfig } from './config.js';
import { createOutbox, type OutboxData } from './outbox.js';
import { createParticipants, type Party } from './participants.js';
import {
  type AgentPolicyRecord,
  changePair,
  contactKeys,
  createJsonOnce,
  type OrgPolicyRecord,
  otherOf,
  type PairRecord,
  pendingOf,
  putJson,
  readJson,
} from './store.js';
import { ConsentView, isLive } from './view.js';

/** What the consent service needs. */
export interface ConsentDeps extends ServiceTelemetry, ServiceResponder {
  nc: NatsConnection;
  log: Logger;
  config: ConsentConfig;
}

type CheckResponse = ApiResponse<typeof consentApi.check>;

const requestNotFound = (id: string) => new ParleyError('NOT_FOUND', `contact request ${id} does not exist`);

function freshPair(a: Party, b: Party, at: string): PairRecord {
  const [lo, hi] = a.id < b.id ? [a, b] : [b, a];
  return {
    pair: [lo.id, hi.id],
    owners: { [lo.id]: lo.ownerId, [hi.id]: hi.ownerId },
    blocks: {},
    requests: [],
    updatedAt: at,
  };
}

/** Marks the pending requests of `rec` that are past their expiry as expired; returns them. */
function expireDue(rec: PairRecord, nowMs: number, at: string): ContactRequest[] {
  const out: ContactRequest[] = [];
  for (const r of rec.requests) {
    if (r.state === 'pending' && Date.parse(r.expiresAt) <= nowMs) {
      r.state = 'expired';
      r.answeredAt = at;
      out.push({ ...r });
    }
  }
  return out;
}

/**
 * The consent service: contact requests and their answers, contacts, blocks, consent policies of
 * agents and orgs, and the `check` the rooms service asks before anyone brings a participant of
 * another owner into a conversation.
 */
export function createConsentService(deps: ConsentDeps): ParleyService {
  const log = deps.log.child({ component: 'consent' });
  const { nc, config } = deps;
  const view = new ConsentView();
  const participants = createParticipants({ nc, tracer: deps.tracer });
  let kv: KV | undefined;
  let js: JetStreamClient | undefined;
  let micro: MicroService | undefined;
  let standing: StandingView | undefined;
  let watch: KvWatch | undefined;
  let sweeper: NodeJS.Timeout | undefined;
  let sweeping: Promise<void> | undefined;
  let outbox: ReturnType<typeof createOutbox> | undefined;
  let deregistrations: Subscription | undefined;
  let started = false;

  const store = () => {
    if (!kv || !js) throw new ParleyError('UNAVAILABLE', 'consent is not started');
    return { kv, js };
  };

  /** The participant the caller acts for: itself, or (`of`) an agent it manages. */
  async function actingFor(caller: string, of: string | undefined): Promise<string> {
    if (of && of !== caller) {
      await participants.requireManage(caller, of);
      return of;
    }
    if (!isParticipantId(caller)) {
      throw new ParleyError('INVALID_ARGUMENT', 'a service names the agent it acts for with `of`');
    }
    return caller;
  }

  /** One event and one audit record per change. A failure is logged: the change itself is done. */
  async function recordChange(o: {
    kind: string;
    action: string;
    actor: string;
    subject: string;
    target?: string;
    data: OutboxData & Record<string, unknown>;
    id?: string;
  }): Promise<void> {
    const { js } = store();
    const traceId = activeTraceIds()?.traceId;
    try {
      await publishEvent(js, 'consent', o.kind, {
        actor: o.actor,
        subject: o.subject,
        data: o.data,
        ...(o.id ? { id: o.id } : {}),
        ...(traceId ? { traceId } : {}),
      });
      await appendAudit(js, {
        domain: 'consent',
        action: o.action,
        actor: o.actor,
        ...(o.target ? { target: o.target } : {}),
        data: { subject: o.subject, ...o.data, notify: undefined },
        ...(o.id ? { id: `aud_${o.id}` } : {}),
        ...(traceId ? { traceId } : {}),
      });
    } catch (err) {
      log.error({ err, kind: o.kind, subject: o.subject }, 'consent event or audit record not written');
    }
  }

  async function recordExpired(requests: ContactRequest[]): Promise<void> {
    for (const r of requests) {
      await recordChange({
        kind: 'expired',
        action: 'expire',
        actor: 'svc_consent',
        subject: r.id,
        target: r.to,
        data: { request: r, notify: [r.from, r.to] },
        // Every replica that notices the same expiry publishes the same ids.
        id: deterministicId('event', `expired:${r.id}`, Date.parse(r.expiresAt)),
      });
    }
  }

  /** Who may answer a request addressed to `to`: `to` itself unless its owner decides; its managers. */
  async function requireAnswerer(caller: string, r: ContactRequest): Promise<void> {
    if (isServiceId(caller)) {
      throw new ParleyError(
        'PERMISSION_DENIED',
        'a contact request is answered by its target or the target’s owner',
      );
    }
    if (caller === r.from) {
      throw new ParleyError(
        'PERMISSION_DENIED',
        `${caller} made request ${r.id}: only ${r.to} (or its owner) answers it`,
      );
    }
    if (caller === r.to) {
      if (r.to.startsWith('agt_') && view.agentPolicy(r.to) === 'owner_decides') {
        throw new ParleyError(
          'PERMISSION_DENIED',
          `${r.to}'s owner answers its contact requests (policy owner_decides)`,
          { details: { policy: 'owner_decides' } },
        );
      }
      return;
    }
    // Anyone else must manage the target agent; to them a request they have no part in does not exist.
    if (!r.to.startsWith('agt_')) throw requestNotFound(r.id);
    try {
      await participants.requireManage(caller, r.to);
    } catch (err) {
      if (isParleyError(err, 'PERMISSION_DENIED') || isParleyError(err, 'NOT_FOUND'))
        throw requestNotFound(r.id);
      throw err;
    }
  }

  async function check(aId: string, bId: string): Promise<CheckResponse> {
    if (aId === bId) return { allowed: true, via: 'self', explain: 'the same participant' };
    const [a, b] = await Promise.all([participants.get(aId), participants.get(bId)]);
    if (a.ownerId === b.ownerId) {
      return {
        allowed: true,
        via: 'same_owner',
        explain: `${aId} and ${bId} have the same owner (${a.ownerId})`,
      };
    }
    const rec = (await readJson<PairRecord>(store().kv, contactKeys.pair(aId, bId)))?.value;
    const blockedBy = rec?.blocks[aId] ? aId : rec?.blocks[bId] ? bId : undefined;
    if (blockedBy) {
      const other = blockedBy === aId ? bId : aId;
      return {
        allowed: false,
        via: 'none',
        missing: 'unblock',
        blockedBy,
        explain: `${blockedBy} blocked ${other}; only ${blockedBy} (or its owner) can lift it: parley contact unblock ${other}`,
      };
    }
    if (a.org === b.org && view.orgPreApproves(a.org)) {
      return { allowed: true, via: 'org_policy', explain: `${a.org} pre-approves contacts inside it` };
    }
    if (rec?.contact)
      return { allowed: true, via: 'contact', explain: `contacts since ${rec.contact.since}` };
    const pending = pendingOf(rec);
    if (pending && isLive(pending)) {
      return {
        allowed: false,
        via: 'none',
        missing: 'contact',
        pending,
        explain: `contact request ${pending.id} from ${pending.from} to ${pending.to} awaits an answer: ${pending.to} (or its owner) can accept it with parley contact accept ${pending.id}`,
      };
    }
    // The hint names the request only when it is possible: a contact request goes to a participant
    // the asker may see, so one hidden by its visibility gets the other ways round instead.
    if (!(await canSee(aId, bId))) {
      return {
        allowed: false,
        via: 'none',
        missing: 'contact',
        explain: `${aId} and ${bId} have different owners and are not contacts, and ${bId} is not visible to ${aId}, so ${aId} cannot ask for contact: ${bId}'s owner can make it visible (parley agent update ${bId} --visibility public) or ${bId} can ask ${aId} (parley contact request ${aId})`,
      };
    }
    return {
      allowed: false,
      via: 'none',
      missing: 'contact',
      explain: `${aId} and ${bId} have different owners and are not contacts: ${aId} can ask with parley contact request ${bId} --reason "…", then ${bId} (or its owner) accepts`,
    };
  }

  /** May `viewer` see `id` (as in discovery)? */
  async function canSee(viewer: string, id: string): Promise<boolean> {
    try {
      await participants.visibleTo(id, viewer);
      return true;
    } catch (err) {
      if (isParleyError(err, 'NOT_FOUND')) return false;
      throw err;
    }
  }

  const handlers = [
    bind(consentApi.request, async (req, ctx) => {
      const { kv } = store();
      const from = await actingFor(ctx.caller, req.of);
      if (req.to === from)
        throw new ParleyError('INVALID_ARGUMENT', 'a participant cannot ask itself for contact');
      const [a, b] = await Promise.all([
        participants.get(from),
        participants.visibleTo(req.to, from).catch((err: unknown) => {
          if (!isParleyError(err, 'NOT_FOUND')) throw err;
          // Said the same way whether it does not exist or is hidden: the asker learns nothing more.
          throw new ParleyError(
            'NOT_FOUND',
            `${req.to} does not exist or is not visible to ${from} (an agent of another organisation is visible only when its card says public): its owner can make it visible (parley agent update ${req.to} --visibility public), or it can ask ${from} for contact instead`,
            { cause: err },
          );
        }),
      ]);
      if (a.ownerId === b.ownerId) {
        throw new ParleyError(
          'INVALID_ARGUMENT',
          `${from} and ${req.to} have the same owner: they need no consent`,
          { details: { via: 'same_owner' } },
        );
      }
      const policy = b.kind === 'agent' ? view.agentPolicy(b.id) : 'agent_decides';
      const autoAccept = policy === 'auto_accept_org' && a.org === b.org;
      const key = contactKeys.pair(from, req.to);
      const id = newId('contactRequest');
      let pointer = false;
      type Outcome = {
        kind: 'existing' | 'crossed' | 'new' | 'auto';
        request: ContactRequest;
        expired: ContactRequest[];
      };
      const { result, written } = await changePair<Outcome>(kv, key, async (current) => {
        const nowMs = Date.now();
        const at = new Date(nowMs).toISOString();
        const rec = current ? structuredClone(current) : freshPair(a, b, at);
        if (rec.blocks[req.to]) {
          throw new ParleyError(
            'BLOCKED',
            `${req.to} blocked ${from}: it accepts no contact requests from it`,
            {
              details: { blockedBy: req.to },
            },
          );
        }
        if (rec.blocks[from]) {
          throw new ParleyError(
            'CONFLICT',
            `${from} blocked ${req.to}: unblock it first (parley contact unblock ${req.to})`,
            {
              details: { blockedBy: from },
            },
          );
        }
        if (rec.contact) {
          throw new ParleyError(
            'CONFLICT',
            `${from} and ${req.to} are contacts already (since ${rec.contact.since})`,
            {
              details: { contact: rec.contact },
            },
          );
        }
        const expired = expireDue(rec, nowMs, at);
        const pending = pendingOf(rec);
        if (pending?.from === from) {
          // Asked before and not answered yet: the same request, unchanged.
          return {
            ...(expired.length ? { next: rec } : {}),
            result: { kind: 'existing', request: { ...pending }, expired },
          };
        }
        if (pending) {
          // The other side had asked too: both said yes, so this is one contact.
          Object.assign(pending, { state: 'accepted', answeredAt: at, answeredBy: from, via: 'crossing' });
          rec.contact = { since: at, via: 'crossing', request: pending.id };
          rec.updatedAt = at;
          return { next: rec, result: { kind: 'crossed', request: { ...pending }, expired } };
        }
        if (!pointer) {
          await createJsonOnce(kv, contactKeys.request(id), { pair: key });
          pointer = true;
        }
        const r: ContactRequest = {
          id,
          from,
          to: req.to,
          reason: req.reason,
          state: autoAccept ? 'accepted' : 'pending',
          createdAt: at,
          expiresAt: new Date(nowMs + config.CONSENT_REQUEST_TTL_MS).toISOString(),
          ...(autoAccept ? { answeredAt: at, answeredBy: req.to, via: 'auto_accept' as const } : {}),
        };
        rec.requests.push(r);
        if (autoAccept) rec.contact = { since: at, via: 'auto_accept', request: id };
        rec.updatedAt = at;
        return { next: rec, result: { kind: autoAccept ? 'auto' : 'new', request: { ...r }, expired } };
      });
      if (written) view.applyWrite(key, written.record, written.revision);
      await recordExpired(result.expired);
      const r = result.request;
      if (result.kind === 'new' || result.kind === 'auto') {
        const ownerDecides = b.kind === 'agent' && policy === 'owner_decides';
        await recordChange({
          kind: 'requested',
          action: 'request',
          actor: ctx.caller,
          subject: r.id,
          target: r.to,
          data: {
            request: r,
            ...(b.kind === 'agent' ? { owner: b.ownerId } : {}),
            policy,
            notify: result.kind === 'new' ? [r.to, ...(ownerDecides ? [b.ownerId] : [])] : [],
          },
        });
      }
      if (result.kind === 'auto' || result.kind === 'crossed') {
        await recordChange({
          kind: 'answered',
          action: 'accept',
          actor: result.kind === 'auto' ? 'svc_consent' : ctx.caller,
          subject: r.id,
          target: r.from,
          data: { request: r, notify: result.kind === 'auto' ? [r.to] : [r.from] },
        });
      }
      return r;
    }),

    bind(consentApi.answer, async (req, ctx) => {
      const { kv } = store();
      const pointer = await readJson<{ pair: string }>(kv, contactKeys.request(req.id));
      if (!pointer) throw requestNotFound(req.id);
      const key = pointer.value.pair;
      const seen = (await readJson<PairRecord>(kv, key))?.value.requests.find((r) => r.id === req.id);
      if (!seen) throw requestNotFound(req.id);
      await requireAnswerer(ctx.caller, seen);
      type Outcome = { expired?: ContactRequest; request?: ContactRequest };
      const { result, written } = await changePair<Outcome>(kv, key, (current) => {
        const at = new Date().toISOString();
        const rec = current ? structuredClone(current) : undefined;
        const r = rec?.requests.find((x) => x.id === req.id);
        if (!rec || !r) throw requestNotFound(req.id);
        if (r.state === 'pending' && Date.parse(r.expiresAt) <= Date.now()) {
          Object.assign(r, { state: 'expired', answeredAt: at });
          return { next: rec, result: { expired: { ...r } } };
        }
        if (r.state !== 'pending') {
          throw new ParleyError('CONFLICT', `contact request ${r.id} was ${r.state} already`, {
            details: { state: r.state },
          });
        }
        r.answeredAt = at;
        r.answeredBy = ctx.caller;
        if (req.answer === 'accept') {
          Object.assign(r, { state: 'accepted', via: 'request' });
          rec.contact = { since: at, via: 'request', request: r.id };
        } else if (req.answer === 'reject') {
          r.state = 'rejected';
        } else {
          r.state = 'blocked';
          rec.blocks[r.to] = at;
        }
        rec.updatedAt = at;
        return { next: rec, result: { request: { ...r } } };
      });
      if (written) view.applyWrite(key, written.record, written.revision);
      if (result.expired) {
        await recordExpired([result.expired]);
        throw new ParleyError('EXPIRED', `contact request ${req.id} expired at ${result.expired.expiresAt}`, {
          details: { expiresAt: result.expired.expiresAt },
        });
      }
      const r = result.request as ContactRequest;
      await recordChange({
        kind: 'answered',
        action: req.answer,
        actor: ctx.caller,
        subject: r.id,
        target: r.from,
        data: { request: r, notify: [r.from] },
      });
      return r;
    }),

    bind(consentApi.block, async (req, ctx) => {
      const { kv } = store();
      const me = await actingFor(ctx.caller, req.of);
      if (req.participant === me)
        throw new ParleyError('INVALID_ARGUMENT', 'a participant cannot block itself');
      const [a, b] = await Promise.all([participants.get(me), participants.get(req.participant)]);
      if (a.ownerId === b.ownerId) {
        throw new ParleyError(
          'INVALID_ARGUMENT',
          `${me} and ${req.participant} have the same owner: nothing to block`,
        );
      }
      const key = contactKeys.pair(me, req.participant);
      type Outcome = { endedContact: boolean; requests: string[]; changed: boolean };
      const { result, written } = await changePair<Outcome>(kv, key, (current) => {
        const at = new Date().toISOString();
        const rec = current ? structuredClone(current) : freshPair(a, b, at);
        if (rec.blocks[me]) return { result: { endedContact: false, requests: [], changed: false } };
        rec.blocks[me] = at;
        const endedContact = rec.contact !== undefined;
        delete rec.contact;
        const requests: string[] = [];
        for (const r of rec.requests) {
          if (r.state !== 'pending') continue;
          Object.assign(r, { state: 'blocked', answeredAt: at, answeredBy: me });
          requests.push(r.id);
        }
        rec.updatedAt = at;
        return { next: rec, result: { endedContact, requests, changed: true } };
      });
      if (written) view.applyWrite(key, written.record, written.revision);
      if (result.changed) {
        await recordChange({
          kind: 'blocked',
          action: 'block',
          actor: ctx.caller,
          subject: me,
          target: req.participant,
          data: {
            a: me,
            b: req.participant,
            by: ctx.caller,
            endedContact: result.endedContact,
            requests: result.requests,
            notify: result.endedContact ? [req.participant] : [],
          },
        });
      }
      return { blocked: req.participant, endedContact: result.endedContact };
    }),

    bind(consentApi.unblock, async (req, ctx) => {
      const { kv } = store();
      const me = await actingFor(ctx.caller, req.of);
      const key = contactKeys.pair(me, req.participant);
      const { written } = await changePair(kv, key, (current) => {
        if (!current?.blocks[me]) {
          throw new ParleyError('NOT_FOUND', `${me} has not blocked ${req.participant}`);
        }
        const rec = structuredClone(current);
        delete rec.blocks[me];
        rec.updatedAt = new Date().toISOString();
        return { next: rec, result: true };
      });
      if (written) view.applyWrite(key, written.record, written.revision);
      await recordChange({
        kind: 'unblocked',
        action: 'unblock',
        actor: ctx.caller,
        subject: me,
        target: req.participant,
        data: { a: me, b: req.participant, by: ctx.caller },
      });
      return { unblocked: req.participant };
    }),

    bind(consentApi.revoke, async (req, ctx) => {
      const { kv } = store();
      const me = await actingFor(ctx.caller, req.of);
      const key = contactKeys.pair(me, req.with);
      const { result, written } = await changePair(kv, key, (current) => {
        if (!current?.contact) throw new ParleyError('NOT_FOUND', `${me} and ${req.with} are not contacts`);
        const rec = structuredClone(current);
        const ended = rec.contact;
        delete rec.contact;
        rec.updatedAt = new Date().toISOString();
        return { next: rec, result: ended };
      });
      if (written) view.applyWrite(key, written.record, written.revision);
      await recordChange({
        kind: 'revoked',
        action: 'revoke',
        actor: ctx.caller,
        subject: me,
        target: req.with,
        data: { a: me, b: req.with, by: ctx.caller, contactRequest: result?.request, notify: [req.with] },
      });
      return { revoked: true as const };
    }),

    bind(consentApi.list, async (req, ctx) => {
      const me = await actingFor(ctx.caller, req.of);
      const contacts: ApiResponse<typeof consentApi.list>['contacts'] = [];
      const blocked: ApiResponse<typeof consentApi.list>['blocked'] = [];
      for (const rec of view.pairsOf(me)) {
        if (!rec.pair.includes(me)) continue;
        const other = otherOf(rec, me);
        if (rec.contact) contacts.push({ with: other, ...rec.contact } as (typeof contacts)[number]);
        const since = rec.blocks[me];
        if (since) blocked.push({ participant: other, since } as (typeof blocked)[number]);
      }
      contacts.sort((x, y) => (x.since < y.since ? -1 : 1));
      blocked.sort((x, y) => (x.since < y.since ? -1 : 1));
      return { contacts, blocked };
    }),

    bind(consentApi.pending, async (req, ctx) => {
      const party = req.of ? await actingFor(ctx.caller, req.of) : ctx.caller;
      // A human sees its own requests and its agents'; `of` narrows to one agent.
      const mine = (id: string, rec: PairRecord) => id === party || (!req.of && rec.owners[id] === party);
      const incoming: ContactRequest[] = [];
      const outgoing: ContactRequest[] = [];
      const now = Date.now();
      for (const rec of view.pairsOf(party)) {
        for (const r of rec.requests) {
          if (!isLive(r, now)) continue;
          if (mine(r.to, rec)) incoming.push(r);
          else if (mine(r.from, rec)) outgoing.push(r);
        }
      }
      const byTime = (x: ContactRequest, y: ContactRequest) => (x.createdAt < y.createdAt ? -1 : 1);
      return { incoming: incoming.sort(byTime), outgoing: outgoing.sort(byTime) };
    }),

    bind(consentApi.check, async (req) => check(req.a, req.b)),

    bind(consentApi.setPolicy, async (req, ctx) => {
      const { kv } = store();
      const at = new Date().toISOString();
      if ('agent' in req) {
        await participants.requireManage(ctx.caller, req.agent);
        const value: AgentPolicyRecord = { policy: req.policy, by: ctx.caller, at };
        const key = contactKeys.agentPolicy(req.agent);
        view.applyWrite(key, value, await putJson(kv, key, value));
        await recordChange({
          kind: 'policy.changed',
          action: 'policy',
          actor: ctx.caller,
          subject: req.agent,
          target: req.agent,
          data: { agent: req.agent, policy: req.policy },
        });
      } else {
        if (!isServiceId(ctx.caller)) await participants.requireOrgAdmin(ctx.caller, req.org);
        const value: OrgPolicyRecord = { preApproveWithinOrg: req.preApproveWithinOrg, by: ctx.caller, at };
        const key = contactKeys.orgPolicy(req.org);
        view.applyWrite(key, value, await putJson(kv, key, value));
        await recordChange({
          kind: 'policy.changed',
          action: 'policy',
          actor: ctx.caller,
          subject: req.org,
          target: req.org,
          data: { org: req.org, preApproveWithinOrg: req.preApproveWithinOrg },
        });
      }
      return { ok: true as const };
    }),
  ];

  /** Turns pending requests past their expiry into `expired`, with an event each. */
  async function sweep(): Promise<void> {
    const { kv } = store();
    for (const [id, key] of view.expiredAt(Date.now())) {
      const { result, written } = await changePair<ContactRequest | undefined>(kv, key, (current) => {
        const rec = current ? structuredClone(current) : undefined;
        const r = rec?.requests.find((x) => x.id === id);
        if (!rec || !r || r.state !== 'pending' || Date.parse(r.expiresAt) > Date.now())
          return { result: undefined };
        Object.assign(r, { state: 'expired', answeredAt: new Date().toISOString() });
        rec.updatedAt = r.answeredAt as string;
        return { next: rec, result: { ...r } };
      });
      if (written) view.applyWrite(key, written.record, written.revision);
      if (result) await recordExpired([result]);
    }
  }

  return {
    name: 'consent',
    async start() {
      const kvm = new Kvm(nc);
      kv = await kvm.open(buckets.contacts);
      const jsm = await jetstreamManager(nc);
      js = jsm.jetstream();
      watch = await watchKv(kv, {
        onEntry: (e: KvEntry) => view.apply(e),
        onError: (err, e) => log.warn({ err, key: e.key }, 'unreadable contacts entry skipped'),
      });
      await watch.initialized;
      // A deregistered agent's owner must not be answered from the cache.
      deregistrations = nc.subscribe(subjects.event('registry', 'agent.deregistered'), {
        callback: (err, msg) => {
          if (!err) participants.forget(msg.json<{ subject?: string }>().subject ?? '');
        },
      });
      outbox = createOutbox({ nc, js, jsm, log, tracer: deps.tracer });
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
      log.info({ ...view.size(), ttlMs: config.CONSENT_REQUEST_TTL_MS }, 'consent started');
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
