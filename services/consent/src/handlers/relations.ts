/** Ending and refusing: block, unblock, revoke a contact. */
import { type ApiParsedRequest, type ApiResponse, type consentApi, ParleyError } from '@parley/contracts';
import type { RequestContext } from '@parley/kit';
import { type ConsentState, freshPair } from '../state.js';
import { contactKeys } from '../store.js';

/** `consent.block`. */
export async function block(
  req: ApiParsedRequest<typeof consentApi.block>,
  ctx: RequestContext,
  c: ConsentState,
): Promise<ApiResponse<typeof consentApi.block>> {
  const me = await c.actingFor(ctx.caller, req.of);
  if (req.participant === me) throw new ParleyError('INVALID_ARGUMENT', 'a participant cannot block itself');
  const [a, b] = await Promise.all([c.participants.get(me), c.participants.get(req.participant)]);
  if (a.ownerId === b.ownerId) {
    throw new ParleyError(
      'INVALID_ARGUMENT',
      `${me} and ${req.participant} have the same owner: nothing to block`,
    );
  }
  const key = contactKeys.pair(me, req.participant);
  type Outcome = { endedContact: boolean; requests: string[]; changed: boolean };
  const { result } = await c.changePair<Outcome>(key, (current) => {
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
  if (result.changed) {
    await c.recordChange({
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
}

/** `consent.unblock`. */
export async function unblock(
  req: ApiParsedRequest<typeof consentApi.unblock>,
  ctx: RequestContext,
  c: ConsentState,
): Promise<ApiResponse<typeof consentApi.unblock>> {
  const me = await c.actingFor(ctx.caller, req.of);
  const key = contactKeys.pair(me, req.participant);
  await c.changePair(key, (current) => {
    if (!current?.blocks[me]) {
      throw new ParleyError('NOT_FOUND', `${me} has not blocked ${req.participant}`);
    }
    const rec = structuredClone(current);
    delete rec.blocks[me];
    rec.updatedAt = new Date().toISOString();
    return { next: rec, result: true };
  });
  await c.recordChange({
    kind: 'unblocked',
    action: 'unblock',
    actor: ctx.caller,
    subject: me,
    target: req.participant,
    data: { a: me, b: req.participant, by: ctx.caller },
  });
  return { unblocked: req.participant };
}

/** `consent.revoke`. */
export async function revoke(
  req: ApiParsedRequest<typeof consentApi.revoke>,
  ctx: RequestContext,
  c: ConsentState,
): Promise<ApiResponse<typeof consentApi.revoke>> {
  const me = await c.actingFor(ctx.caller, req.of);
  const key = contactKeys.pair(me, req.with);
  const { result } = await c.changePair(key, (current) => {
    if (!current?.contact) throw new ParleyError('NOT_FOUND', `${me} and ${req.with} are not contacts`);
    const rec = structuredClone(current);
    const ended = rec.contact;
    delete rec.contact;
    rec.updatedAt = new Date().toISOString();
    return { next: rec, result: ended };
  });
  await c.recordChange({
    kind: 'revoked',
    action: 'revoke',
    actor: ctx.caller,
    subject: me,
    target: req.with,
    data: { a: me, b: req.with, by: ctx.caller, contactRequest: result?.request, notify: [req.with] },
  });
  return { revoked: true as const };
}
