import * as z from 'zod';
import { ParticipantId, PrincipalId, RoomId } from './ids.js';
import { named } from './registry-of-schemas.js';
import { subjects } from './subjects.js';

/** A control-plane event on `parley.evt.<domain>.<kind>` (stream PARLEY_EVENTS). */
export const ParleyEvent = named(
  'Event',
  z
    .object({
      id: z.string().describe('evt_… (also the Nats-Msg-Id).'),
      domain: z.string(),
      kind: z.string(),
      at: z.iso.datetime(),
      actor: PrincipalId.optional().describe('Who caused it.'),
      subject: z.string().optional().describe('The id the event is about.'),
      data: z.record(z.string(), z.unknown()).default({}),
      traceId: z.string().optional(),
    })
    .describe('A control-plane event.'),
);
export type ParleyEvent = z.infer<typeof ParleyEvent>;

/** A kind of event, for the protocol documents. */
export interface EventDefinition {
  domain: string;
  kind: string;
  summary: string;
  subject: string;
}

function ev(domain: string, kind: string, summary: string): EventDefinition {
  return { domain, kind, summary, subject: subjects.event(domain, kind) };
}

/** Every event Parley publishes. */
export const eventCatalog: EventDefinition[] = [
  ev('registry', 'org.created', 'An organisation was created.'),
  ev('registry', 'user.created', 'A human was created.'),
  ev('registry', 'agent.created', 'An agent was registered.'),
  ev('registry', 'agent.updated', 'An agent’s card changed.'),
  ev('registry', 'agent.deregistered', 'An agent was removed.'),
  ev('presence', 'changed', 'A participant’s presence state changed.'),
  ev('presence', 'needs_input', 'An agent needs input from its owner.'),
  ev('rooms', 'created', 'A room was created.'),
  ev('rooms', 'closed', 'A room was closed.'),
  ev('rooms', 'member.changed', 'Someone joined, left, was removed or changed role/filter.'),
  ev(
    'rooms',
    'paused',
    'A room was paused for agents (runaway detector, budget, or a person); data.notify lists the humans told.',
  ),
  ev('rooms', 'resumed', 'A paused room was resumed by a human.'),
  ev('rooms', 'dead_letter', 'A delivery went to the DLQ after max deliveries.'),
  ev('consent', 'requested', 'A contact request was made (data.owner: the target’s owner).'),
  ev('consent', 'answered', 'A contact request was accepted, rejected or blocked.'),
  ev('consent', 'expired', 'A pending contact request expired unanswered.'),
  ev('consent', 'revoked', 'A contact was revoked.'),
  ev('consent', 'blocked', 'A participant blocked another (an existing contact ended).'),
  ev('consent', 'unblocked', 'A block was lifted.'),
  ev('consent', 'policy.changed', 'An agent’s consent policy or an org’s pre-approval changed.'),
  ev('governance', 'credentials.rotated', 'A participant’s credentials were rotated.'),
  ev('governance', 'credentials.revoked', 'A participant’s credentials were revoked.'),
  ev('governance', 'suspended', 'An agent was suspended.'),
  ev('governance', 'resumed', 'An agent’s suspension was lifted.'),
  ev('governance', 'budget.exceeded', 'A budget was crossed.'),
  ev('governance', 'token.revoked', 'A delegation token, or every token of a participant, was revoked.'),
  ev(
    'governance',
    'usage.reported',
    'A usage report was counted (the usage ledger; Nats-Msg-Id de-duplicates retries).',
  ),
];

/** An audit record on `parley.audit.<domain>` (stream PARLEY_AUDIT, no delete, no purge). */
export const AuditRecord = named(
  'AuditRecord',
  z
    .object({
      id: z.string(),
      at: z.iso.datetime(),
      domain: z.enum([
        'policy',
        'delegation',
        'tool',
        'membership',
        'consent',
        'suspension',
        'credentials',
        'delivery',
        'access',
        'task',
        'approval',
      ]),
      action: z.string().describe('e.g. authorize, exchange, invite, accept, suspend'),
      actor: PrincipalId,
      onBehalfOf: z.array(PrincipalId).optional().describe('The delegation chain, first to current.'),
      target: z.string().optional().describe('The id acted on.'),
      room: RoomId.optional(),
      decision: z.object({ allow: z.boolean(), reason: z.string(), decidedBy: z.string() }).optional(),
      message: z.string().optional(),
      causedBy: z.string().optional(),
      toolCall: z.string().optional(),
      traceId: z.string().optional(),
      data: z.record(z.string(), z.unknown()).optional(),
    })
    .describe('An audit record.'),
);
export type AuditRecord = z.infer<typeof AuditRecord>;

/** A dead letter on `parley.dlq.<participantId>`. */
export const DeadLetter = named(
  'DeadLetter',
  z.object({
    recipient: ParticipantId,
    room: RoomId,
    roomSeq: z.int().min(1),
    deliveries: z.int().min(1),
    at: z.iso.datetime(),
    message: z.record(z.string(), z.unknown()).describe('The RoomMessage that could not be handled.'),
  }),
);
export type DeadLetter = z.infer<typeof DeadLetter>;
