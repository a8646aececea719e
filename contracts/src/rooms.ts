import * as z from 'zod';
import { defineApi } from './api.js';
import { AgentId, MessageId, ParticipantId, PrincipalId, RoomId } from './ids.js';
import { limits } from './limits.js';
import { Provenance, RoomMessage } from './messages.js';
import { named } from './registry-of-schemas.js';

/** A member's role: owners manage the room, members talk, observers only read. */
export const MemberRole = named('MemberRole', z.enum(['owner', 'member', 'observer']));
export type MemberRole = z.infer<typeof MemberRole>;

/** What a member receives: every message, or only those that mention it. */
export const DeliveryFilter = named(
  'DeliveryFilter',
  z.enum(['all', 'mentions']).describe('mentions = only messages that @mention the member'),
);
export type DeliveryFilter = z.infer<typeof DeliveryFilter>;

/** Room policy. */
export const RoomPolicy = named(
  'RoomPolicy',
  z
    .object({
      whoMayInvite: z.enum(['owner', 'members']).default('members'),
      onContactRevoked: z
        .enum(['stay', 'remove'])
        .default('stay')
        .describe('What happens to a member whose contact with the inviter is revoked.'),
      history: z
        .enum(['shared', 'since_joined'])
        .default('shared')
        .describe('shared = members read the whole room log; since_joined = only from when they joined.'),
    })
    .describe('How the room is run.'),
);
export type RoomPolicy = z.infer<typeof RoomPolicy>;

/** A member of a room. */
export const RoomMember = named(
  'RoomMember',
  z.object({
    id: ParticipantId,
    role: MemberRole,
    delivery: DeliveryFilter,
    joinedSeq: z.int().min(1).describe('Room sequence of the membership event that added it.'),
    joinedAt: z.iso.datetime(),
    invitedBy: PrincipalId.optional(),
    mark: z.string().max(200).optional().describe('e.g. "contact revoked"'),
  }),
);
export type RoomMember = z.infer<typeof RoomMember>;

/** A room as the API returns it. */
export const Room = named(
  'Room',
  z.object({
    id: RoomId,
    title: z.string(),
    owner: ParticipantId,
    direct: z.boolean().describe('A direct room between two participants.'),
    policy: RoomPolicy,
    closed: z.boolean(),
    paused: z.boolean().describe('Paused for agents (runaway detector or an admin).'),
    createdAt: z.iso.datetime(),
    members: z.array(RoomMember),
    lastSeq: z.int().min(0).describe('Room sequence of the latest membership or room change.'),
  }),
);
export type Room = z.infer<typeof Room>;

/** The data part of a `membership` message in the room log. */
export const MembershipChange = named(
  'MembershipChange',
  z
    .object({
      change: z.enum(['joined', 'left', 'removed', 'updated']),
      member: ParticipantId,
      role: MemberRole,
      delivery: DeliveryFilter,
      by: PrincipalId,
      mark: z.string().max(200).optional(),
    })
    .describe('Data part of a membership message: who joined, left, was removed or changed.'),
);
export type MembershipChange = z.infer<typeof MembershipChange>;

/** The data part of a `room` message in the room log. */
export const RoomChange = named(
  'RoomChange',
  z
    .object({
      change: z.enum(['created', 'closed', 'paused', 'resumed', 'updated']),
      by: PrincipalId,
      title: z.string().optional(),
      reason: z.string().max(500).optional(),
    })
    .describe('Data part of a room message: the room was created, closed, paused or resumed.'),
);
export type RoomChange = z.infer<typeof RoomChange>;

/** A fresh `{ room }` object: each named request needs its own schema instance. */
const RoomRef = () => z.object({ room: RoomId });
const Title = z.string().trim().min(1).max(200);

/** `rooms.create` */
export const CreateRoom = named(
  'CreateRoomRequest',
  z.object({
    title: Title,
    members: z.array(ParticipantId).max(100).default([]).describe('Invited at creation.'),
    direct: z.boolean().default(false),
    policy: RoomPolicy.optional(),
  }),
);

/** An entry of a room listing. */
export const RoomSummary = named(
  'RoomSummary',
  z.object({
    id: RoomId,
    title: z.string(),
    owner: ParticipantId,
    role: MemberRole,
    direct: z.boolean(),
    closed: z.boolean(),
    memberCount: z.int().min(0),
    createdAt: z.iso.datetime(),
  }),
);
export type RoomSummary = z.infer<typeof RoomSummary>;

/** A page of a listing. */
const Cursor = z.string().max(200).describe('Opaque; pass it back to get the next page.');

/** One entry of room history. */
export const HistoryEntry = named('HistoryEntry', z.object({ seq: z.int().min(1), message: RoomMessage }));
export type HistoryEntry = z.infer<typeof HistoryEntry>;

/** `rooms.history`'s paging fields, shared by the owner's read (`rooms.ownerRead`). */
const HistoryPaging = {
  order: z.enum(['newest', 'oldest']).default('newest'),
  before: z.int().min(1).optional().describe('Only entries with seq < before.'),
  after: z.int().min(0).optional().describe('Only entries with seq > after.'),
  limit: z
    .int()
    .min(1)
    .max(limits.maxPageSize)
    .default(50)
    .describe(
      'Most entries in the page. A page also holds at most 896 KiB of messages (a reply has to fit in one NATS message), so a page of large messages can hold fewer, with `more` set.',
    ),
};

/**
 * Present on a page of history when retention (the room log's age, byte or per-room limit) removed
 * entries of the room the caller could have read: the position of the room's first retained entry.
 * A read whose `after` or `before` points into what was removed is refused with `HISTORY_EXPIRED`
 * instead (see docs/architecture.md, "Retention").
 */
const RetainedFrom = z
  .int()
  .min(1)
  .optional()
  .describe(
    'Set when retention removed older entries of this room: the position where retained history starts.',
  );

/** The rooms service's API. */
export const roomsApi = {
  create: defineApi({
    service: 'rooms',
    method: 'create',
    summary: 'Create a room owned by the caller, optionally inviting members.',
    access: 'participant',
    request: CreateRoom,
    response: Room,
  }),
  get: defineApi({
    service: 'rooms',
    method: 'get',
    effect: 'read',
    summary: 'A room with its members (members only).',
    access: 'participant',
    request: named('GetRoomRequest', RoomRef()),
    response: Room,
  }),
  list: defineApi({
    service: 'rooms',
    method: 'list',
    effect: 'read',
    summary: 'The rooms the caller is a member of.',
    access: 'participant',
    request: named(
      'ListRoomsRequest',
      z.object({
        includeClosed: z.boolean().default(false),
        limit: z.int().min(1).max(limits.maxPageSize).default(50),
        cursor: Cursor.optional(),
      }),
    ),
    response: named('ListRoomsResponse', z.object({ rooms: z.array(RoomSummary), next: Cursor.optional() })),
  }),
  invite: defineApi({
    service: 'rooms',
    method: 'invite',
    summary: 'Add a participant to a room (consent is required across owners).',
    access: 'participant',
    request: named(
      'InviteRequest',
      RoomRef().extend({
        participant: ParticipantId,
        role: MemberRole.exclude(['owner']).default('member'),
        delivery: DeliveryFilter.default('all'),
      }),
    ),
    response: RoomMember,
  }),
  join: defineApi({
    service: 'rooms',
    method: 'join',
    summary: 'Join a room the caller owns the invitation to (re-join after leaving).',
    access: 'participant',
    request: named('JoinRequest', RoomRef()),
    response: RoomMember,
  }),
  leave: defineApi({
    service: 'rooms',
    method: 'leave',
    summary: 'Leave a room.',
    access: 'participant',
    request: named('LeaveRequest', RoomRef()),
    response: named('LeaveResponse', z.object({ room: RoomId, seq: z.int().min(1) })),
  }),
  remove: defineApi({
    service: 'rooms',
    method: 'remove',
    summary: 'Remove a member (room owner only).',
    access: 'participant',
    request: named('RemoveMemberRequest', RoomRef().extend({ participant: ParticipantId })),
    response: named('RemoveMemberResponse', z.object({ room: RoomId, seq: z.int().min(1) })),
  }),
  setMember: defineApi({
    service: 'rooms',
    method: 'setMember',
    summary: 'Change a member’s role (owner only) or delivery filter (the member itself or the owner).',
    access: 'participant',
    request: named(
      'SetMemberRequest',
      RoomRef().extend({
        participant: ParticipantId,
        role: MemberRole.exclude(['owner']).optional(),
        delivery: DeliveryFilter.optional(),
      }),
    ),
    response: RoomMember,
  }),
  close: defineApi({
    service: 'rooms',
    method: 'close',
    summary: 'Close a room: no more messages or invites; history stays.',
    access: 'participant',
    request: named('CloseRoomRequest', RoomRef()),
    response: Room,
  }),
  history: defineApi({
    service: 'rooms',
    method: 'history',
    effect: 'read',
    summary: 'A page of a room’s log (members only), newest or oldest first.',
    access: 'participant',
    request: named('HistoryRequest', RoomRef().extend(HistoryPaging)),
    response: named(
      'HistoryResponse',
      z.object({
        entries: z.array(HistoryEntry),
        more: z.boolean().describe('True when more entries exist in the same direction.'),
        retainedFrom: RetainedFrom,
      }),
    ),
  }),
  ownerRooms: defineApi({
    service: 'rooms',
    method: 'ownerRooms',
    effect: 'read',
    summary:
      'The rooms one of the caller’s agents is a member of (the agent’s owner only: not an admin, not anyone else), with the agent’s role in each.',
    access: 'human',
    request: named(
      'OwnerRoomsRequest',
      z.object({
        agent: AgentId,
        includeClosed: z.boolean().default(false),
        limit: z.int().min(1).max(limits.maxPageSize).default(50),
        cursor: Cursor.optional(),
      }),
    ),
    response: named(
      'OwnerRoomsResponse',
      z.object({ agent: AgentId, rooms: z.array(RoomSummary), next: Cursor.optional() }),
    ),
  }),
  ownerRead: defineApi({
    service: 'rooms',
    method: 'ownerRead',
    effect: 'read',
    summary:
      'Read-only view of a room one of the caller’s agents is in, without joining (the agent’s owner only): the room and a page of its history as the agent sees it. Every read is an audit record (domain `access`, action `room.owner_read`) written before the page is returned.',
    access: 'human',
    request: named('OwnerReadRequest', RoomRef().extend({ agent: AgentId, ...HistoryPaging })),
    response: named(
      'OwnerReadResponse',
      z.object({
        agent: AgentId,
        room: Room,
        entries: z.array(HistoryEntry),
        more: z.boolean().describe('True when more entries exist in the same direction.'),
        retainedFrom: RetainedFrom,
        audit: z.string().describe('The id of the audit record this read wrote.'),
      }),
    ),
  }),
  pause: defineApi({
    service: 'rooms',
    method: 'pause',
    summary:
      'Pause a room for agents (the owner, a human member, or a service): their sends are refused with ROOM_PAUSED until a human resumes it.',
    access: 'participant',
    request: named(
      'PauseRoomRequest',
      RoomRef().extend({ reason: z.string().trim().min(1).max(500).default('paused') }),
    ),
    response: Room,
  }),
  resume: defineApi({
    service: 'rooms',
    method: 'resume',
    summary: 'Resume a paused room (a human member or a service): agents may send again.',
    access: 'participant',
    request: named(
      'ResumeRoomRequest',
      RoomRef().extend({ reason: z.string().trim().min(1).max(500).default('resumed') }),
    ),
    response: Room,
  }),
  members: defineApi({
    service: 'rooms',
    method: 'members',
    effect: 'read',
    summary: 'Services only: which of `participants` are current members of a room.',
    access: 'service',
    request: named(
      'RoomMembersRequest',
      RoomRef().extend({ participants: z.array(ParticipantId).min(1).max(100) }),
    ),
    response: named(
      'RoomMembersResponse',
      z.object({
        room: RoomId,
        members: z.array(ParticipantId),
        owner: ParticipantId,
        paused: z.boolean(),
        closed: z.boolean(),
      }),
    ),
  }),
  findMessage: defineApi({
    service: 'rooms',
    method: 'findMessage',
    effect: 'read',
    summary:
      'Services only: a message of any room by its id (the id’s time bounds the search of the room log).',
    access: 'service',
    request: named(
      'FindMessageRequest',
      z.object({
        id: MessageId,
        readers: z
          .array(ParticipantId)
          .max(100)
          .optional()
          .describe('Answered in `readers`: which of these may read the message now.'),
      }),
    ),
    response: named(
      'FoundMessage',
      HistoryEntry.extend({
        readers: z
          .array(ParticipantId)
          .optional()
          .describe(
            'Of the `readers` asked about, those who may read it now: current members of its room whose history policy and the message’s audience let them.',
          ),
      }),
    ),
  }),
  notify: defineApi({
    service: 'rooms',
    method: 'notify',
    summary:
      'Services only: append a notice for one participant to its notice room (a room with it as the only member, created on first use), so it arrives in its inbox in order, durably, and stays in history.',
    access: 'service',
    request: named(
      'NotifyRequest',
      z.object({
        to: ParticipantId,
        text: z.string().min(1).max(4000),
        data: z.record(z.string(), z.unknown()).describe('The data part; `event` names what it is.'),
        key: z
          .string()
          .regex(/^[A-Za-z0-9_:.-]{1,200}$/)
          .describe('Idempotency key: a retry with the same key is stored once (2 minute window).'),
        provenance: Provenance.optional().describe('Label text that came from another participant.'),
      }),
    ),
    response: named(
      'NotifyResponse',
      z.object({ room: RoomId, roomSeq: z.int().min(1), id: MessageId, duplicate: z.boolean() }),
    ),
  }),
  contactRevoked: defineApi({
    service: 'rooms',
    method: 'contactRevoked',
    summary:
      'Services only (consent): `a` and `b` stopped being contacts; in every open room where one was invited by the other, apply the room’s onContactRevoked policy (stay, marked; or remove).',
    access: 'service',
    request: named(
      'ContactRevokedRequest',
      z.object({ a: ParticipantId, b: ParticipantId, by: PrincipalId }),
    ),
    response: named(
      'ContactRevokedResponse',
      z.object({
        marked: z.array(z.object({ room: RoomId, member: ParticipantId })),
        removed: z.array(z.object({ room: RoomId, member: ParticipantId })),
      }),
    ),
  }),
  attachInbox: defineApi({
    service: 'rooms',
    method: 'attachInbox',
    summary:
      'Points the caller’s push inbox consumer at `_INBOX.<caller>.deliver.<session>`, a subject the calling connection already subscribes to, so that connection alone receives the caller’s deliveries. Refused with CONFLICT while another connection receives them (one process per participant at a time: the second is refused). A pull inbox from an earlier version is made a push one at its acknowledgement floor.',
    access: 'participant',
    request: named(
      'AttachInboxRequest',
      z.object({
        session: z
          .string()
          .regex(/^[A-Za-z0-9]{8,40}$/)
          .describe('A random token naming this connection’s subscription.'),
        resumeAfter: z
          .number()
          .int()
          .min(0)
          .optional()
          .describe(
            'An inbox position the consumer acknowledged everything up to, as it told this connection earlier. When its acknowledgement floor is now below it (nats-server lost the consumer’s state and brought it back at its start), the consumer is made again after it instead of pushing the inbox again. Only while the consumer points at this session.',
          ),
      }),
    ),
    response: named(
      'AttachInboxResponse',
      z.object({
        deliverSubject: z.string(),
        migrated: z.boolean().describe('A pull inbox consumer was replaced by a push one.'),
        resumedAfter: z
          .number()
          .int()
          .optional()
          .describe('Set when the consumer was made again after `resumeAfter`.'),
      }),
    ),
  }),
} as const;
