/**
 * What the consent service's handlers share: the KV-watched view, registry lookups, the buckets
 * once started, and the helpers every group of handlers uses (acting for, events and audit, who
 * may answer, the check).
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import {
  type ApiResponse,
  activeTraceIds,
  type ContactRequest,
  type consentApi,
  deterministicId,
  isParleyError,
  isParticipantId,
  isServiceId,
  ParleyError,
} from '@parley/contracts';
import { appendAudit, type Logger, publishEvent } from '@parley/kit';
import type { OutboxData } from './outbox.js';
import { createParticipants, type Party } from './participants.js';
import type { ConsentDeps } from './service.js';
import { changePair, contactKeys, type PairChange, type PairRecord, pendingOf, readJson } from './store.js';
import { ConsentView, isLive } from './view.js';

/** What `consent.check` answers. */
export type CheckResponse = ApiResponse<typeof consentApi.check>;

/** NOT_FOUND for a request, the same whether it does not exist or the caller has no part in it. */
export const requestNotFound = (id: string) =>
  new ParleyError('NOT_FOUND', `contact request ${id} does not exist`);

/** A new pair record of two participants. */
export function freshPair(a: Party, b: Party, at: string): PairRecord {
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
export function expireDue(rec: PairRecord, nowMs: number, at: string): ContactRequest[] {
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

/** The consent service's shared state and helpers; see {@link createConsentState}. */
export type ConsentState = ReturnType<typeof createConsentState>;

/** Builds the state the handlers share; `open` is called by `start()` with the bucket and stream. */
export function createConsentState(deps: ConsentDeps, log: Logger) {
  const { nc, config } = deps;
  const view = new ConsentView();
  const participants = createParticipants({ nc, tracer: deps.tracer });
  let kv: KV | undefined;
  let js: JetStreamClient | undefined;

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

  /**
   * {@link changePair} on the bucket, and the view told of the write at once: the KV watch brings it
   * only a moment later, and the caller's next request must already see it.
   */
  async function changePairSeen<R>(
    key: string,
    decide: (current: PairRecord | undefined) => PairChange<R> | Promise<PairChange<R>>,
  ): Promise<{ result: R; written?: { record: PairRecord; revision: number } }> {
    const out = await changePair(store().kv, key, decide);
    if (out.written) view.applyWrite(key, out.written.record, out.written.revision);
    return out;
  }

  return {
    deps,
    config,
    log,
    view,
    participants,
    store,
    /** Called by `start()` once the bucket is open. */
    open(o: { kv: KV; js: JetStreamClient }) {
      kv = o.kv;
      js = o.js;
    },
    actingFor,
    changePair: changePairSeen,
    recordChange,
    recordExpired,
    requireAnswerer,
    check,
    canSee,
  };
}
