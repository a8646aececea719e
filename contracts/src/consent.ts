import * as z from 'zod';
import { defineApi } from './api.js';
import { AgentId, ContactRequestId, OrgId, ParticipantId } from './ids.js';
import { named } from './registry-of-schemas.js';

/** Who answers contact requests addressed to an agent. */
export const ConsentPolicy = named(
  'ConsentPolicy',
  z
    .enum(['agent_decides', 'owner_decides', 'auto_accept_org'])
    .describe('auto_accept_org = requests from the same org are accepted at once'),
);
export type ConsentPolicy = z.infer<typeof ConsentPolicy>;

/** State of a contact request. */
export const ContactRequestState = named(
  'ContactRequestState',
  z.enum(['pending', 'accepted', 'rejected', 'blocked', 'expired', 'withdrawn']),
);

/** A contact request. */
export const ContactRequest = named(
  'ContactRequest',
  z.object({
    id: ContactRequestId,
    from: ParticipantId,
    to: ParticipantId,
    reason: z.string().max(1000),
    state: ContactRequestState,
    createdAt: z.iso.datetime(),
    expiresAt: z.iso.datetime(),
    answeredAt: z.iso.datetime().optional(),
    answeredBy: ParticipantId.optional(),
  }),
);
export type ContactRequest = z.infer<typeof ContactRequest>;

/** An accepted, bilateral contact. */
export const Contact = named(
  'Contact',
  z.object({
    a: ParticipantId,
    b: ParticipantId,
    since: z.iso.datetime(),
    via: z.enum(['request', 'org_policy', 'same_owner']),
  }),
);
export type Contact = z.infer<typeof Contact>;

/** The consent service's API. */
export const consentApi = {
  request: defineApi({
    service: 'consent',
    method: 'request',
    summary: 'Ask another participant for contact, with a reason.',
    access: 'participant',
    request: named(
      'ContactRequestRequest',
      z.object({ to: ParticipantId, reason: z.string().trim().min(1).max(1000) }),
    ),
    response: ContactRequest,
  }),
  answer: defineApi({
    service: 'consent',
    method: 'answer',
    summary: 'Accept, reject or block a pending request addressed to the caller (or its agent).',
    access: 'participant',
    request: named(
      'AnswerContactRequest',
      z.object({ id: ContactRequestId, answer: z.enum(['accept', 'reject', 'block']) }),
    ),
    response: ContactRequest,
  }),
  revoke: defineApi({
    service: 'consent',
    method: 'revoke',
    summary: 'End an accepted contact (either side).',
    access: 'participant',
    request: named('RevokeContactRequest', z.object({ with: ParticipantId })),
    response: named('RevokeContactResponse', z.object({ revoked: z.boolean() })),
  }),
  list: defineApi({
    service: 'consent',
    method: 'list',
    summary: 'The caller’s contacts.',
    access: 'participant',
    request: named('ListContactsRequest', z.object({ of: AgentId.optional() })),
    response: named('ListContactsResponse', z.object({ contacts: z.array(Contact) })),
  }),
  pending: defineApi({
    service: 'consent',
    method: 'pending',
    summary: 'Pending requests to and from the caller (and, for an owner, its agents).',
    access: 'participant',
    request: named('PendingContactsRequest', z.object({})),
    response: named(
      'PendingContactsResponse',
      z.object({ incoming: z.array(ContactRequest), outgoing: z.array(ContactRequest) }),
    ),
  }),
  check: defineApi({
    service: 'consent',
    method: 'check',
    summary: 'Whether two participants may talk (used by the rooms service).',
    access: 'service',
    request: named('CheckConsentRequest', z.object({ a: ParticipantId, b: ParticipantId })),
    response: named(
      'CheckConsentResponse',
      z.object({
        allowed: z.boolean(),
        via: z.enum(['contact', 'same_owner', 'org_policy', 'none']),
        missing: z.string().optional(),
      }),
    ),
  }),
  setPolicy: defineApi({
    service: 'consent',
    method: 'setPolicy',
    summary: 'Set who answers requests for an agent (its owner), or org pre-approval (an admin).',
    access: 'human',
    request: named(
      'SetConsentPolicyRequest',
      z.union([
        z.object({ agent: AgentId, policy: ConsentPolicy }),
        z.object({ org: OrgId, preApproveWithinOrg: z.boolean() }),
      ]),
    ),
    response: named('SetConsentPolicyResponse', z.object({ ok: z.literal(true) })),
  }),
} as const;
