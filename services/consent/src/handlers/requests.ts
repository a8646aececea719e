/** Contact requests: ask (crossed requests, auto-accept, idempotent by pair) and answer. */
import {
  type ApiParsedRequest,
  type ApiResponse,
  type ContactRequest,
  type consentApi,
  isParleyError,
  newId,
  ParleyError,
} from '@parley/contracts';
import type { RequestContext } from '@parley/kit';
import { type ConsentState, expireDue, freshPair, requestNotFound } from '../state.js';
import { contactKeys, createJsonOnce, type PairRecord, pendingOf, readJson } from '../store.js';

/** `consent.request`. */
export async function request(
  req: ApiParsedRequest<typeof consentApi.request>,
  ctx: RequestContext,
  c: ConsentState,
): Promise<ApiResponse<typeof consentApi.request>> {
  const { kv } = c.store();
  const from = await c.actingFor(ctx.caller, req.of);
  if (req.to === from)
    throw new ParleyError('INVALID_ARGUMENT', 'a participant cannot ask itself for contact');
  const [a, b] = await Promise.all([
    c.participants.get(from),
    c.participants.visibleTo(req.to, from).catch((err: unknown) => {
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
  const policy = b.kind === 'agent' ? c.view.agentPolicy(b.id) : 'agent_decides';
  const autoAccept = policy === 'auto_accept_org' && a.org === b.org;
  const key = contactKeys.pair(from, req.to);
  const id = newId('contactRequest');
  let pointer = false;
  type Outcome = {
    kind: 'existing' | 'crossed' | 'new' | 'auto';
    request: ContactRequest;
    expired: ContactRequest[];
  };
  const { result } = await c.changePair<Outcome>(key, async (current) => {
    const nowMs = Date.now();
    const at = new Date(nowMs).toISOString();
    const rec = current ? structuredClone(current) : freshPair(a, b, at);
    if (rec.blocks[req.to]) {
      throw new ParleyError('BLOCKED', `${req.to} blocked ${from}: it accepts no contact requests from it`, {
        details: { blockedBy: req.to },
      });
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
      expiresAt: new Date(nowMs + c.config.CONSENT_REQUEST_TTL_MS).toISOString(),
      ...(autoAccept ? { answeredAt: at, answeredBy: req.to, via: 'auto_accept' as const } : {}),
    };
    rec.requests.push(r);
    if (autoAccept) rec.contact = { since: at, via: 'auto_accept', request: id };
    rec.updatedAt = at;
    return { next: rec, result: { kind: autoAccept ? 'auto' : 'new', request: { ...r }, expired } };
  });
  await c.recordExpired(result.expired);
  const r = result.request;
  if (result.kind === 'new' || result.kind === 'auto') {
    const ownerDecides = b.kind === 'agent' && policy === 'owner_decides';
    await c.recordChange({
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
    await c.recordChange({
      kind: 'answered',
      action: 'accept',
      actor: result.kind === 'auto' ? 'svc_consent' : ctx.caller,
      subject: r.id,
      target: r.from,
      data: { request: r, notify: result.kind === 'auto' ? [r.to] : [r.from] },
    });
  }
  return r;
}

/** `consent.answer`. */
export async function answer(
  req: ApiParsedRequest<typeof consentApi.answer>,
  ctx: RequestContext,
  c: ConsentState,
): Promise<ApiResponse<typeof consentApi.answer>> {
  const { kv } = c.store();
  const pointer = await readJson<{ pair: string }>(kv, contactKeys.request(req.id));
  if (!pointer) throw requestNotFound(req.id);
  const key = pointer.value.pair;
  const seen = (await readJson<PairRecord>(kv, key))?.value.requests.find((r) => r.id === req.id);
  if (!seen) throw requestNotFound(req.id);
  await c.requireAnswerer(ctx.caller, seen);
  type Outcome = { expired?: ContactRequest; request?: ContactRequest };
  const { result } = await c.changePair<Outcome>(key, (current) => {
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
  if (result.expired) {
    await c.recordExpired([result.expired]);
    throw new ParleyError('EXPIRED', `contact request ${req.id} expired at ${result.expired.expiresAt}`, {
      details: { expiresAt: result.expired.expiresAt },
    });
  }
  const r = result.request as ContactRequest;
  await c.recordChange({
    kind: 'answered',
    action: req.answer,
    actor: ctx.caller,
    subject: r.id,
    target: r.from,
    data: { request: r, notify: [r.from] },
  });
  return r;
}
