import { decodeTime, encodeTime, ulid } from 'ulid';
import * as z from 'zod';
import { named } from './registry-of-schemas.js';

/** Prefixes of Parley identifiers. Every id is `<prefix>_<ULID>`. */
export const idPrefixes = {
  org: 'org',
  user: 'usr',
  agent: 'agt',
  room: 'room',
  message: 'msg',
  task: 'task',
  contactRequest: 'creq',
  toolCall: 'tc',
  token: 'tok',
  mcpToken: 'mtk',
  apiKey: 'pak',
  hook: 'hook',
  session: 'ses',
  event: 'evt',
} as const;

/** The kinds of object that have a Parley id. */
export type IdKind = keyof typeof idPrefixes;

const ULID_BODY = '[0-9A-HJKMNP-TV-Z]{26}';

function idSchema(kind: IdKind, description: string) {
  return z
    .string()
    .regex(new RegExp(`^${idPrefixes[kind]}_${ULID_BODY}$`), {
      message: `must be a ${kind} id (${idPrefixes[kind]}_ followed by a 26-character ULID)`,
    })
    .describe(description);
}

/** An organisation id, `org_…`. */
export const OrgId = named('OrgId', idSchema('org', 'Organisation id: org_ followed by a ULID.'));
export type OrgId = z.infer<typeof OrgId>;
/** A human's id, `usr_…`. */
export const UserId = named('UserId', idSchema('user', 'Human id: usr_ followed by a ULID.'));
export type UserId = z.infer<typeof UserId>;
/** An agent's id, `agt_…`. */
export const AgentId = named('AgentId', idSchema('agent', 'Agent id: agt_ followed by a ULID.'));
export type AgentId = z.infer<typeof AgentId>;
/** A room's id, `room_…`. */
export const RoomId = named('RoomId', idSchema('room', 'Room id: room_ followed by a ULID.'));
export type RoomId = z.infer<typeof RoomId>;
/** A message's id, `msg_…`, assigned by the ingress. */
export const MessageId = named(
  'MessageId',
  idSchema('message', 'Message id: msg_ followed by a ULID, assigned by the rooms ingress.'),
);
export type MessageId = z.infer<typeof MessageId>;
/** A task's id, `task_…`. */
export const TaskId = named('TaskId', idSchema('task', 'Task id: task_ followed by a ULID.'));
export type TaskId = z.infer<typeof TaskId>;
/** A contact request's id, `creq_…`. */
export const ContactRequestId = named(
  'ContactRequestId',
  idSchema('contactRequest', 'Contact request id: creq_ followed by a ULID.'),
);
export type ContactRequestId = z.infer<typeof ContactRequestId>;
/** A recorded tool call's id, `tc_…`. */
export const ToolCallId = named('ToolCallId', idSchema('toolCall', 'Tool call id: tc_ followed by a ULID.'));
export type ToolCallId = z.infer<typeof ToolCallId>;
/** A delegation token's id (`jti`), `tok_…`. */
export const TokenId = named('TokenId', idSchema('token', 'Delegation token id (jti).'));
export type TokenId = z.infer<typeof TokenId>;

/** An access token of the MCP bridge's HTTP endpoint, `mtk_…` (its id, not its secret). */
export const McpTokenId = named(
  'McpTokenId',
  idSchema('mcpToken', 'MCP access token id: mtk_ followed by a ULID.'),
);
export type McpTokenId = z.infer<typeof McpTokenId>;

/** A gateway API key (its id, not its secret), `pak_…`. */
export const ApiKeyId = named('ApiKeyId', idSchema('apiKey', 'Gateway API key id: pak_ followed by a ULID.'));
export type ApiKeyId = z.infer<typeof ApiKeyId>;

/** An inbound webhook of the gateway, `hook_…` (its URL is `/v1/hooks/<id>`). */
export const HookId = named('HookId', idSchema('hook', 'Inbound webhook id: hook_ followed by a ULID.'));
export type HookId = z.infer<typeof HookId>;

/** A participant is a human or an agent: both have an inbox and can be room members. */
export const ParticipantId = named(
  'ParticipantId',
  z
    .string()
    .regex(new RegExp(`^(usr|agt)_${ULID_BODY}$`), {
      message: 'must be a participant id (usr_… or agt_…)',
    })
    .describe('A human (usr_…) or an agent (agt_…).'),
);
export type ParticipantId = z.infer<typeof ParticipantId>;

/** A Parley service's principal id, e.g. `svc_rooms`. Only service credentials may speak as one. */
export const ServiceId = named(
  'ServiceId',
  z
    .string()
    .regex(/^svc_[a-z][a-z0-9]{1,30}$/, { message: 'must be a service id (svc_<name>)' })
    .describe('A Parley service acting as itself, e.g. svc_rooms.'),
);
export type ServiceId = z.infer<typeof ServiceId>;

/** Whoever can make a request on NATS: a participant or a service. */
export const PrincipalId = named(
  'PrincipalId',
  z.union([ParticipantId, ServiceId]).describe('A participant or a service.'),
);
export type PrincipalId = z.infer<typeof PrincipalId>;

/**
 * Random numbers for ids from a buffer refilled 1,024 values at a time: the ulid package's own
 * source makes one webcrypto call per character (16 per id), which was 6.9% of the rooms service's
 * CPU on the message path. Same quality (the platform's CSPRNG), one call per 64 ids.
 */
const pool = new Uint32Array(1_024);
let poolAt = pool.length;
function bufferedRandom(): number {
  if (poolAt === pool.length) {
    globalThis.crypto.getRandomValues(pool);
    poolAt = 0;
  }
  return (pool[poolAt++] as number) / 0x1_0000_0000;
}

/** Creates a new id of the given kind: `newId('agent')` → `agt_01J…`. */
export function newId<K extends IdKind>(kind: K): `${(typeof idPrefixes)[K]}_${string}` {
  return `${idPrefixes[kind]}_${ulid(undefined, bufferedRandom)}`;
}

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

/**
 * An id that is the same wherever it is computed from the same `seed` and `time`: replicas that
 * each notice the same thing (e.g. a participant's presence expiring) publish the same event id,
 * and JetStream's de-duplication keeps one.
 */
export function deterministicId<K extends IdKind>(
  kind: K,
  seed: string,
  time: number,
): `${(typeof idPrefixes)[K]}_${string}` {
  let body = '';
  // 16 Crockford characters (80 bits) from FNV-1a of the seed, salted per 5-character chunk.
  for (let chunk = 0; chunk < 4; chunk++) {
    let h = 0x811c9dc5 ^ chunk;
    for (let i = 0; i < seed.length; i++) {
      h ^= seed.charCodeAt(i);
      h = Math.imul(h, 0x01000193) >>> 0;
    }
    for (let j = 0; j < 4; j++) {
      body += CROCKFORD[h & 31];
      h >>>= 5;
    }
  }
  return `${idPrefixes[kind]}_${encodeTime(Math.max(0, Math.floor(time)), 10)}${body}`;
}

/** The kind of participant an id names, or undefined when it names none. */
export function participantKind(id: string): 'human' | 'agent' | undefined {
  if (id.startsWith('usr_')) return 'human';
  if (id.startsWith('agt_')) return 'agent';
  return undefined;
}

/** True when `id` is a well-formed human's id (`usr_…`). */
export function isUserId(id: string): boolean {
  return UserId.safeParse(id).success;
}

/** True when `id` is a well-formed participant id. */
export function isParticipantId(id: string): boolean {
  return ParticipantId.safeParse(id).success;
}

/** True when `id` is a well-formed service id. */
export function isServiceId(id: string): boolean {
  return ServiceId.safeParse(id).success;
}

/** The service id for a service name: `serviceId('rooms')` → `svc_rooms`. */
export function serviceId(name: string): ServiceId {
  return ServiceId.parse(`svc_${name}`);
}

/**
 * When an id was made (ids are ULIDs, whose first 48 bits are milliseconds): `msg_…` ids are made by
 * the ingress just before the message is stored, `tc_…` ids just before a tool call is authorized.
 * Undefined when `id` is not a Parley id.
 */
export function idTime(id: string): Date | undefined {
  const body = id.slice(id.indexOf('_') + 1);
  if (!new RegExp(`^${ULID_BODY}$`).test(body)) return undefined;
  return new Date(decodeTime(body));
}
