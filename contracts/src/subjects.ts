import { ParleyError } from './errors.js';

/** A single NATS subject token Parley accepts: letters, digits, `_` and `-`. */
const TOKEN = /^[A-Za-z0-9_-]{1,128}$/;

/** Throws `INVALID_ARGUMENT` unless `value` is a safe single subject token. */
export function token(value: string, what = 'subject token'): string {
  if (typeof value !== 'string' || !TOKEN.test(value)) {
    throw new ParleyError('INVALID_ARGUMENT', `${what} is not a valid subject token: ${String(value)}`);
  }
  return value;
}

function tokens(value: string, what: string): string {
  for (const t of value.split('.')) token(t, what);
  return value;
}

/** The root of every Parley subject. */
export const ROOT = 'parley';

/**
 * `parley.in.` — the prefix of every subject a participant publishes on (the next token is the
 * participant: see {@link callerOf}). For code that must test a subject's shape in place, on a hot
 * path, without splitting it.
 */
export const IN_PREFIX = `${ROOT}.in.`;

/** Verbs a participant may publish under its own `parley.in.<id>.` prefix. */
export const verbs = { send: 'send', presence: 'presence', usage: 'usage', api: 'api' } as const;

/**
 * Subject builders. Each validates its tokens, so an id can never smuggle a `.`, `*` or `>` into a
 * subject. Names follow "Names on NATS" in docs/architecture.md.
 */
export const subjects = {
  /** `parley.in.<id>.send` — request/reply: append a message to a room. */
  send: (participantId: string) => `${ROOT}.in.${token(participantId, 'participant id')}.send`,
  /** `parley.in.<id>.presence` — heartbeat and work status. */
  presence: (participantId: string) => `${ROOT}.in.${token(participantId, 'participant id')}.presence`,
  /** `parley.in.<id>.usage` — usage report (model, tokens, cost). */
  usage: (participantId: string) => `${ROOT}.in.${token(participantId, 'participant id')}.usage`,
  /** `parley.in.<caller>.api.<service>.<method>` — a request to a service API. */
  api: (callerId: string, service: string, method: string) =>
    `${ROOT}.in.${token(callerId, 'caller id')}.api.${token(service, 'service')}.${token(method, 'method')}`,
  /** What a service subscribes to for one of its API methods, from any caller. */
  apiListen: (service: string, method: string) =>
    `${ROOT}.in.*.api.${token(service, 'service')}.${token(method, 'method')}`,
  /** What a service subscribes to for all of its API methods, from any caller (one subscription). */
  apiServiceListen: (service: string) => `${ROOT}.in.*.api.${token(service, 'service')}.*`,
  /** What the ingress subscribes to for sends from any participant. */
  sendListen: () => `${ROOT}.in.*.send`,
  /** What the registry subscribes to for presence heartbeats. */
  presenceListen: () => `${ROOT}.in.*.presence`,
  /** What governance subscribes to for usage reports. */
  usageListen: () => `${ROOT}.in.*.usage`,
  /** Every subject a participant may publish on. */
  participantPrefix: (participantId: string) => `${ROOT}.in.${token(participantId, 'participant id')}.>`,
  /** `parley.room.<partition>.<roomId>` — the room log. */
  room: (partition: number, roomId: string) =>
    `${ROOT}.room.${partitionToken(partition)}.${token(roomId, 'room id')}`,
  /**
   * `parley.room.<partition>.*` — one fan-out partition. (`*`, not `>`: nats-server 2.9 does not
   * accept `>` as a subset of the stream's `parley.room.*.*`.)
   */
  roomPartition: (partition: number) => `${ROOT}.room.${partitionToken(partition)}.*`,
  /**
   * `parley.inbox.<shard>.<participantId>.<roomId>` — one participant's deliveries from one room, in
   * the participant's inbox shard ({@link inboxShardOf}).
   */
  inbox: (participantId: string, roomId: string) =>
    `${ROOT}.inbox.${inboxShardOf(participantId)}.${token(participantId, 'participant id')}.${token(roomId, 'room id')}`,
  /** `parley.inbox.<shard>.<participantId>.*` — a participant's whole inbox (its consumer's filter). */
  inboxAll: (participantId: string) =>
    `${ROOT}.inbox.${inboxShardOf(participantId)}.${token(participantId, 'participant id')}.*`,
  /** `parley.inbox.<shard>.*.*` — every inbox entry of one shard (that shard's stream). */
  inboxShard: (shard: number) => `${ROOT}.inbox.${shardToken(shard)}.*.*`,
  /** `parley.evt.<domain>.<kind>` — a control-plane event. */
  event: (domain: string, kind: string) =>
    `${ROOT}.evt.${token(domain, 'event domain')}.${tokens(kind, 'event kind')}`,
  /** `parley.evt.<domain>.>` — every event of one domain (a subscription or a consumer filter). */
  eventsOf: (domain: string) => `${ROOT}.evt.${token(domain, 'event domain')}.>`,
  /** `parley.audit.<domain>` — an audit record. */
  audit: (domain: string) => `${ROOT}.audit.${token(domain, 'audit domain')}`,
  /** `parley.dlq.<participantId>` — a dead letter for that participant. */
  dlq: (participantId: string) => `${ROOT}.dlq.${token(participantId, 'participant id')}`,
  /**
   * `_INBOX.<id>.policy` — governance tells a participant that an allow it may have cached (a
   * revoked token, a suspended participant of the chain) no longer holds. Core NATS, best effort:
   * the SDK also lets cached allows expire by themselves.
   */
  policyNotice: (participantId: string) => `_INBOX.${token(participantId, 'participant id')}.policy`,
  /**
   * `_INBOX.<id>.deliver[.<session>]` — where a participant's push inbox consumer delivers: under
   * its own reply prefix, so only that participant (and services) can subscribe. The bare form is
   * the placeholder a new consumer gets; a connection attaches it to its own session subject
   * (`rooms.attachInbox`), which makes it the only one receiving.
   */
  inboxDeliver: (participantId: string, session?: string) =>
    `_INBOX.${token(participantId, 'participant id')}.deliver${session === undefined ? '' : `.${token(session, 'session')}`}`,
  /** `_INBOX.<id>.fanout.<p>.<replica>` — where fan-out partition p's push consumer delivers to a lease holder. */
  fanoutDeliver: (serviceId: string, partition: number, replica: string) =>
    `_INBOX.${token(serviceId, 'service id')}.fanout.${partition}.${token(replica, 'replica id')}`,
  /**
   * `_INBOX.svc_gateway.a2a.<caller>.<taskId>` — the live events of an A2A task a gateway replica
   * runs, for another replica serving `tasks/resubscribe` (core NATS; the task record in KV is the
   * snapshot). Under the gateway's reply prefix: no participant can listen.
   */
  a2aTaskEvents: (caller: string, taskId: string) =>
    `_INBOX.svc_gateway.a2a.${token(caller, 'caller id')}.${token(taskId, 'task id')}`,
  /** `_INBOX.svc_gateway.a2actl.<caller>.<taskId>` — request/reply: cancel it, to the replica running it. */
  a2aTaskControl: (caller: string, taskId: string) =>
    `_INBOX.svc_gateway.a2actl.${token(caller, 'caller id')}.${token(taskId, 'task id')}`,
  /** `_INBOX.<id>` — the reply-subject prefix a participant's connection must use. */
  replyPrefix: (principalId: string) => `_INBOX.${token(principalId, 'principal id')}`,
} as const;

/**
 * Inbox shards: the inboxes are split over this many streams (`PARLEY_INBOX_<shard>`), each holding
 * the inboxes of the participants whose id hashes to it. Fixed by the protocol, like the hash: a
 * participant's shard never changes. On nats-server 2.9 a consumer finds its next entry by reading
 * every entry stored after its last one, for everyone in its stream; a stream per shard makes that
 * walk 16 times shorter (docs/architecture.md, "Inbox shards").
 */
export const INBOX_SHARDS = 16;

/** A participant's inbox shard: FNV-1a (32 bit) of its id, modulo {@link INBOX_SHARDS}. */
export function inboxShardOf(participantId: string): number {
  return partitionOf(participantId, INBOX_SHARDS);
}

function shardToken(shard: number): string {
  if (!Number.isInteger(shard) || shard < 0 || shard >= INBOX_SHARDS) {
    throw new ParleyError(
      'INVALID_ARGUMENT',
      `inbox shard must be an integer 0..${INBOX_SHARDS - 1}, got ${shard}`,
    );
  }
  return String(shard);
}

function partitionToken(p: number): string {
  if (!Number.isInteger(p) || p < 0 || p > 4095) {
    throw new ParleyError('INVALID_ARGUMENT', `partition must be an integer 0..4095, got ${p}`);
  }
  return String(p);
}

/**
 * The caller of a `parley.in.<id>.…` subject. The NATS server guarantees that only the holder of
 * `<id>`'s credentials can publish there, so this is the authenticated caller.
 */
export function callerOf(subject: string): string {
  const parts = subject.split('.');
  if (parts.length < 4 || parts[0] !== ROOT || parts[1] !== 'in' || !parts[2]) {
    throw new ParleyError('INVALID_ARGUMENT', `not a participant subject: ${subject}`);
  }
  return parts[2];
}

/** The room id of a `parley.room.<p>.<roomId>` or `parley.inbox.<shard>.<pid>.<roomId>` subject. */
export function roomOf(subject: string): string {
  const i = subject.lastIndexOf('.');
  return subject.slice(i + 1);
}

/**
 * The fan-out partition of a room: FNV-1a (32 bit) of the room id's UTF-8 bytes, modulo the number
 * of partitions. Bridges in other languages compute the same value.
 */
export function partitionOf(roomId: string, partitions: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < roomId.length; i++) {
    h ^= roomId.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h % partitions;
}
