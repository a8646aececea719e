/**
 * Consent in the rooms service. Nobody brings a participant of another owner into a conversation
 * (invite, a room created with members, a direct room) unless the two are contacts, or the consent
 * service says otherwise (same owner, org pre-approval): the consent service's `check` decides, and
 * a refusal is `NO_CONSENT` naming the pair, what is missing and how to fix it. The consent service
 * being unreachable refuses too (UNAVAILABLE): consent is never assumed.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { consentApi, ParleyError, request, serviceId, type Tracer } from '@parley/contracts';
import type { ParleyMetrics } from '@parley/kit';

const SELF = serviceId('rooms');

/** Throws NO_CONSENT unless `inviter` may bring `invitee` into a conversation. */
export type ConsentGate = (inviter: string, invitee: string) => Promise<void>;

/** Tries of one `consent.check` before the gate answers UNAVAILABLE. */
export const CONSENT_CHECK_TRIES = 3;

/** The gate, asking the consent service over NATS. */
export function createConsentGate(o: {
  nc: NatsConnection;
  tracer?: Tracer | undefined;
  /** Refusals are counted in `parley_policy_denials_total{reason="NO_CONSENT"}`. */
  metrics?: ParleyMetrics | undefined;
  /** How long one try waits for the answer. @default 5000 */
  timeoutMs?: number | undefined;
}): ConsentGate {
  const ask = async (inviter: string, invitee: string) => {
    // The check is a read, asked before anything is written: a try that got no answer (a consent
    // replica busy or restarting, a loaded server) is asked again, and when none answers the
    // caller gets UNAVAILABLE — nothing changed, try again — rather than DEADLINE_EXCEEDED ("it may
    // still complete"), which a room create given up on this way never does.
    for (let i = 1; ; i++) {
      try {
        return await request(
          o.nc,
          SELF,
          consentApi.check,
          { a: inviter, b: invitee },
          { tracer: o.tracer, timeout: o.timeoutMs ?? 5000 },
        );
      } catch (err) {
        const code = (err as ParleyError).code;
        if (code !== 'DEADLINE_EXCEEDED' && code !== 'UNAVAILABLE') throw err;
        if (i >= CONSENT_CHECK_TRIES) {
          throw new ParleyError(
            'UNAVAILABLE',
            `consent between ${inviter} and ${invitee} could not be checked now (${(err as Error).message}, ${i} tries); nothing was changed: try again`,
            { cause: err, retryAfterMs: 1_000, details: { inviter, invitee } },
          );
        }
      }
    }
  };
  return async (inviter, invitee) => {
    if (inviter === invitee) return;
    const r = await ask(inviter, invitee);
    if (r.allowed) return;
    o.metrics?.recordDenial('NO_CONSENT');
    const fix =
      r.missing === 'unblock'
        ? `${r.blockedBy} must lift its block first (parley contact unblock)`
        : r.pending
          ? `${r.pending.to} (or its owner) accepts request ${r.pending.id}: parley contact accept ${r.pending.id}`
          : `${inviter} asks first (parley contact request ${invitee} --reason "…") and ${invitee} (or its owner) accepts`;
    throw new ParleyError('NO_CONSENT', `${inviter} may not bring ${invitee} into a room: ${r.explain}`, {
      details: {
        inviter,
        invitee,
        missing: r.missing ?? 'contact',
        ...(r.blockedBy ? { blockedBy: r.blockedBy } : {}),
        ...(r.pending ? { pending: r.pending.id } : {}),
        fix,
      },
    });
  };
}
