import type * as z from 'zod';
import { a2aApi } from './a2a.js';
import type { ApiMethod } from './api.js';
import { approvalsApi } from './approvals.js';
import { bindingsApi, mcpApi } from './bindings.js';
import { consentApi } from './consent.js';
import { AuditRecord, DeadLetter, eventCatalog, ParleyEvent } from './events.js';
import { gatewayApi } from './gateway.js';
import { governanceApi, UsageReply, UsageReport } from './governance.js';
import { RoomMessage, SendReply, SendRequest } from './messages.js';
import { PresenceHeartbeat, registryApi } from './registry.js';
import { roomsApi } from './rooms.js';
import { tasksApi } from './tasks.js';

/** Every API method, by service. */
export const apis = {
  rooms: roomsApi,
  tasks: tasksApi,
  registry: registryApi,
  consent: consentApi,
  governance: { ...governanceApi, ...approvalsApi },
  bindings: bindingsApi,
  mcp: mcpApi,
  gateway: gatewayApi,
  a2a: a2aApi,
} as const;

/** Every API method as a flat list. */
export function allApiMethods(): ApiMethod[] {
  return Object.values(apis).flatMap((service) => Object.values(service) as ApiMethod[]);
}

/** A channel that is not an API method: the message path and the streams. */
export interface ChannelDefinition {
  /** AsyncAPI channel id. */
  id: string;
  /** Subject with `{param}` placeholders. */
  address: string;
  summary: string;
  /** `send` = clients publish, `receive` = clients consume. */
  action: 'send' | 'receive';
  payload: z.ZodType;
  reply?: z.ZodType;
  parameters: Record<string, string>;
}

/** The message path and stream channels. */
export const channels: ChannelDefinition[] = [
  {
    id: 'send',
    address: 'parley.in.{participantId}.send',
    summary:
      'Append a message to a room. Request/reply: the reply comes after JetStream stored the message; an error reply carries the Parley-Error header.',
    action: 'send',
    payload: SendRequest,
    reply: SendReply,
    parameters: { participantId: 'The sender; only its own credentials may publish here.' },
  },
  {
    id: 'presence',
    address: 'parley.in.{participantId}.presence',
    summary: 'Heartbeat with presence state and activity line (the SDK sends it every 10 s).',
    action: 'send',
    payload: PresenceHeartbeat,
    parameters: { participantId: 'The participant.' },
  },
  {
    id: 'usage',
    address: 'parley.in.{participantId}.usage',
    summary:
      'Report model usage and cost, tied to a message, room or task. Request/reply: the reply says whether it was counted and which budgets it crossed (a refusal carries the Parley-Error header).',
    action: 'send',
    payload: UsageReport,
    reply: UsageReply,
    parameters: { participantId: 'The reporting participant.' },
  },
  {
    id: 'roomLog',
    address: 'parley.room.{partition}.{roomId}',
    summary:
      'The room log (stream PARLEY_ROOMS): every message and membership change of a room, in order. Written by the rooms service only.',
    action: 'receive',
    payload: RoomMessage,
    parameters: { partition: 'FNV-1a(roomId) mod partitions', roomId: 'The room.' },
  },
  {
    id: 'inbox',
    address: 'parley.inbox.{shard}.{participantId}.{roomId}',
    summary:
      'Deliveries (stream PARLEY_INBOX_{shard}, one of 16), read through the participant’s durable consumer named after it. Headers: Parley-Room-Seq, Parley-Room-Time (when the room log stored it), Parley-Prev-Seq, Parley-Rewound (only after the room log lost the position delivered last), traceparent.',
    action: 'receive',
    payload: RoomMessage,
    parameters: {
      shard: 'FNV-1a(participantId) mod 16: the inbox stream holding the participant’s inbox.',
      participantId: 'The recipient.',
      roomId: 'The room it came from.',
    },
  },
  {
    id: 'events',
    address: 'parley.evt.{domain}.{kind}',
    summary: `Control-plane events (stream PARLEY_EVENTS). Kinds: ${eventCatalog.map((e) => `${e.domain}.${e.kind}`).join(', ')}.`,
    action: 'receive',
    payload: ParleyEvent,
    parameters: { domain: 'registry, presence, rooms, consent, governance', kind: 'See the list above.' },
  },
  {
    id: 'audit',
    address: 'parley.audit.{domain}',
    summary: 'Audit records (stream PARLEY_AUDIT: deny delete, deny purge).',
    action: 'receive',
    payload: AuditRecord,
    parameters: {
      domain: 'policy, delegation, tool, membership, consent, suspension, credentials, delivery, access',
    },
  },
  {
    id: 'deadLetters',
    address: 'parley.dlq.{participantId}',
    summary: 'Dead letters (stream PARLEY_DLQ).',
    action: 'receive',
    payload: DeadLetter,
    parameters: { participantId: 'The recipient that failed to handle it.' },
  },
];
