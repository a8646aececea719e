import * as z from 'zod';
import { defineApi } from './api.js';
import { AgentId, ContactRequestId, OrgId, ParticipantId } from './ids.js';
import { named } from './registry-of-schemas.js';

/**
 * Who answers contact requests addressed to an agent (set by its owner):
 * - `agent_decides`: the agent itself (its owner may always answer for it too);
 * - `owner_decides`: only its owner (or an admin of its org); the agent's own answer is refused;
 * - `auto_accept_org`: requests from participants of the agent's org are accepted at once, others
 *   as with `agent_decides`.
 */
export const ConsentPolicy = named(
  'ConsentPolicy',
  z
    .enum(['agent_decides', 'owner_decides', 'auto_accept_org'])
    .describe(
      'Who answers requests to an agent; auto_accept_org = requests from its own org are accepted at once',
    ),
);
export type ConsentPolicy = z.infer<typeof ConsentPolicy>;

/** State of a contact request. Only `pending` changes, once. */
export const ContactRequestState = named(
  'ContactRequestState',
  z
    .enum(['pending', 'accepted', 'rejected', 'blocked', 'expired'])
    .describe('pending until answered or expired; every other state is final'),
);
export type ContactRequestState = z.infer<typeof ContactRequestState>;

/** How a contact came about. */
export const ContactVia = named(
  'ContactVia',
  z
    .enum(['request', 'auto_accept', 'crossing'])
    .describe(
      'request = accepted by the target or its owner; auto_accept = the target’s policy accepted it at once; crossing = both asked each other',
    ),
);
export type ContactVia = z.infer<typeof ContactVia>;

/** A contact request. */
export const ContactRequest = named(
  'ContactRequest',
  z.object({
    id: ContactRequestId,
    from: ParticipantId,
    to: ParticipantId,
    reason: z.string().max(1000).describe('Written by the requester: untrusted text for the target.'),
    state: ContactRequestState,
    createdAt: z.iso.datetime(),
    expiresAt: z.iso.datetime().describe('A pending request turns expired at this time.'),
    answeredAt: z.iso.datetime().optional(),
    answeredBy: ParticipantId.optional().describe(
      'The target, its owner, or (crossing) the requester’s peer.',
    ),
    via: ContactVia.optional().describe('For an accepted request: how.'),
  }),
);
export type ContactRequest = z.infer<typeof ContactRequest>;

/** An accepted, bilateral contact, as seen from one side. */
export const Contact = named(
  'Contact',
  z.object({
    with: ParticipantId.describe('The other side.'),
    since: z.iso.datetime(),
    via: ContactVia,
    request: ContactRequestId.describe('The request that made it.'),
  }),
);
export type Contact = z.infer<typeof Contact>;

/** Why two participants may (or may not) talk. */
export const ConsentVia = named(
  'ConsentVia',
  z
    .enum(['self', 'same_owner', 'org_policy', 'contact', 'none'])
    .describe(
      'same_owner = a human and its own agents, or agents of one owner; org_policy = the org pre-approves contacts inside it',
    ),
);
export type ConsentVia = z.infer<typeof ConsentVia>;

/** `of`: an owner (or an admin of its org) acting for one of its agents. */
const Of = () =>
  AgentId.optional().describe('Act for this agent (its owner or an admin of its org); default: the caller.');

/** The consent service's API. */
export const consentApi = {
  request: defineApi({
    service: 'consent',
    method: 'request',
    summary:
      'Ask another participant for contact, with a reason. Returns the pending request, or an accepted one when the target’s policy auto-accepts or the target had already asked the caller (crossing requests become one contact). A repeat of a pending request returns it unchanged.',
    access: 'participant',
    request: named(
      'ContactRequestRequest',
      z.object({ to: ParticipantId, reason: z.string().trim().min(1).max(1000), of: Of() }),
    ),
    response: ContactRequest,
  }),
  answer: defineApi({
    service: 'consent',
    method: 'answer',
    summary:
      'Accept, reject or block a pending request addressed to the caller, or (for an owner) to one of its agents, as the target’s policy allows.',
    access: 'participant',
    request: named(
      'AnswerContactRequest',
      z.object({ id: ContactRequestId, answer: z.enum(['accept', 'reject', 'block']) }),
    ),
    response: ContactRequest,
  }),
  block: defineApi({
    service: 'consent',
    method: 'block',
    summary:
      'Block a participant: its requests are refused with BLOCKED, an existing contact ends (as with revoke), its pending requests turn blocked.',
    access: 'participant',
    request: named('BlockRequest', z.object({ participant: ParticipantId, of: Of() })),
    response: named(
      'BlockResponse',
      z.object({ blocked: ParticipantId, endedContact: z.boolean().describe('True when a contact ended.') }),
    ),
  }),
  unblock: defineApi({
    service: 'consent',
    method: 'unblock',
    summary: 'Lift a block the caller (or its agent) set.',
    access: 'participant',
    request: named('UnblockRequest', z.object({ participant: ParticipantId, of: Of() })),
    response: named('UnblockResponse', z.object({ unblocked: ParticipantId })),
  }),
  revoke: defineApi({
    service: 'consent',
    method: 'revoke',
    summary:
      'End an accepted contact (either side). Nothing already said is removed; new invites are refused; shared rooms apply their onContactRevoked policy.',
    access: 'participant',
    request: named('RevokeContactRequest', z.object({ with: ParticipantId, of: Of() })),
    response: named('RevokeContactResponse', z.object({ revoked: z.literal(true) })),
  }),
  list: defineApi({
    service: 'consent',
    method: 'list',
    effect: 'read',
    summary: 'The contacts of the caller (or of its agent) and whom it blocked.',
    access: 'participant',
    request: named('ListContactsRequest', z.object({ of: Of() })),
    response: named(
      'ListContactsResponse',
      z.object({
        contacts: z.array(Contact),
        blocked: z.array(z.object({ participant: ParticipantId, since: z.iso.datetime() })),
      }),
    ),
  }),
  pending: defineApi({
    service: 'consent',
    method: 'pending',
    effect: 'read',
    summary:
      'Pending requests to and from the caller and, for a human, to and from its agents (or only those of `of`).',
    access: 'participant',
    request: named('PendingContactsRequest', z.object({ of: Of() })),
    response: named(
      'PendingContactsResponse',
      z.object({ incoming: z.array(ContactRequest), outgoing: z.array(ContactRequest) }),
    ),
  }),
  check: defineApi({
    service: 'consent',
    method: 'check',
    effect: 'read',
    summary:
      'Services only: may `a` bring `b` into a conversation (invite, room with members, direct room)? Used by the rooms service.',
    access: 'service',
    request: named('CheckConsentRequest', z.object({ a: ParticipantId, b: ParticipantId })),
    response: named(
      'CheckConsentResponse',
      z.object({
        allowed: z.boolean(),
        via: ConsentVia,
        missing: z
          .enum(['contact', 'unblock'])
          .optional()
          .describe(
            'contact = a contact request must be made and accepted; unblock = one side blocked the other',
          ),
        blockedBy: ParticipantId.optional(),
        pending: ContactRequest.optional().describe('A pending request between the two, if any.'),
        explain: z.string().describe('For a person: why, and how to fix it.'),
      }),
    ),
  }),
  setPolicy: defineApi({
    service: 'consent',
    method: 'setPolicy',
    summary:
      'Set who answers requests for an agent (its owner or an org admin), or whether an org pre-approves contacts inside it (an admin of the org).',
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

/** What a consent notice carries in its data part (a `system` message in the participant's notice room). */
export const ContactNotice = named(
  'ContactNotice',
  z
    .object({
      event: z
        .enum(['contact_request', 'contact_update'])
        .describe(
          'contact_request = a new request for you (or your agent); contact_update = a request was answered or expired, or a contact ended',
        ),
      request: ContactRequest.optional(),
      change: z.enum(['accepted', 'rejected', 'blocked', 'expired', 'revoked']).optional(),
      with: ParticipantId.optional().describe('For revoked: the other side.'),
      participant: ParticipantId.optional().describe('Whose contact this is about (you, or your agent).'),
    })
    .describe('Data part of a consent notice.'),
);
export type ContactNotice = z.infer<typeof ContactNotice>;
