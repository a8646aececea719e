/**
 * Delegation on the message path: a send that carries a token (`delegation`) is admitted only if
 * the token verifies against the published keys (signature, expiry, revocation — no round trip:
 * see kit's delegation verifier), nobody in its chain is suspended or revoked, and the sender is
 * either its current actor (acting for the principal) or the one who delegated to the current
 * actor (handing it over: the principal for an issued token, the previous actor for an exchanged
 * one). The verified chain is stamped on the stored message as `onBehalfOf`, with the token itself
 * on a hand-over, so the receiver sees "A, acting for alice, asks…" and can act under it.
 *
 * Refusals are audited (domain `policy`, fire-and-forget so a refusal is not slowed by it); the
 * admitted message is its own record in the room log.
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import { isParleyError, ParleyError, type PrincipalId } from '@parley/contracts';
import { appendAudit, type DelegationVerifier, type Logger, type ParleyMetrics } from '@parley/kit';
import type { SendGuard } from '../ingress.js';
import type { PolicyCache } from '../policy-cache.js';

/** What the delegation guard needs. */
export interface DelegationGuardOptions {
  verifier: DelegationVerifier;
  policy: PolicyCache;
  js: JetStreamClient;
  log: Logger;
  metrics?: ParleyMetrics | undefined;
}

/** The delegation guard. */
export function delegationGuard(o: DelegationGuardOptions): SendGuard {
  const log = o.log.child({ component: 'delegation-guard' });
  function refused(err: unknown, sender: string, room: string, jti?: string): never {
    const e = isParleyError(err)
      ? err
      : new ParleyError('UNAUTHENTICATED', 'the delegation token could not be verified');
    o.metrics?.recordDenial(e.code);
    void appendAudit(o.js, {
      domain: 'policy',
      action: 'send.refused',
      actor: sender as PrincipalId,
      room,
      decision: { allow: false, reason: e.message, decidedBy: 'ingress' },
      data: { code: e.code, ...(jti ? { jti } : {}) },
    }).catch((auditErr) => log.warn({ err: auditErr }, 'refusal not audited'));
    throw e;
  }
  async function admitToken(sender: string, token: string, room: string) {
    let view: Awaited<ReturnType<DelegationVerifier['verify']>>;
    try {
      view = await o.verifier.verify(token);
    } catch (err) {
      refused(err, sender, room);
    }
    const current = view.actor;
    const previous = view.chain.length > 1 ? (view.chain[view.chain.length - 2] as string) : view.principal;
    const handover = sender !== current && sender === previous;
    if (sender !== current && !handover) {
      refused(
        new ParleyError(
          'PERMISSION_DENIED',
          `${sender} may not send under this delegation: ${current} acts under it (handed over by ${previous})`,
          { details: { actor: current } },
        ),
        sender,
        room,
        view.claims.jti,
      );
    }
    try {
      for (const p of [view.principal, ...view.chain]) o.policy.check(p);
    } catch (err) {
      refused(err, sender, room, view.claims.jti);
    }
    return {
      onBehalfOf: {
        principal: view.principal,
        chain: view.chain,
        scope: view.scope,
        tokenId: view.claims.jti,
        expiresAt: view.expiresAt.toISOString(),
        ...(handover ? { token } : {}),
      },
    };
  }
  return {
    name: 'delegation',
    // Without a token (most sends) the answer is synchronous: no promise, no microtask.
    admit: ({ sender, request, room }) =>
      request.delegation ? admitToken(sender, request.delegation, room.id) : undefined,
  };
}
