/**
 * Room state in the `parley_rooms` bucket. The room log (PARLEY_ROOMS) is the source of truth; these
 * are views of it:
 *
 * - `room.<roomId>` — the control view: current members, policy, closed/paused. Written by the control
 *   plane right after it appends an event to the log (read-your-writes for the ingress and the API).
 * - `member.<participantId>.<roomId>` — one key per membership, so "my rooms" is a key listing.
 * - `fanout.<roomId>` — the fan-out's view: every member's membership intervals in log positions, and
 *   the position of the last event applied. Written only by the partition's lease holder, in log
 *   order, so after a crash a new owner knows exactly who was a member at any replayed position.
 */
import type { KV, KvEntry } from '@nats-io/kv';
import {
  type DeliveryFilter,
  type MemberRole,
  ParleyError,
  type Room,
  type RoomMember,
  type RoomPolicy,
} from '@parley/contracts';
import { isKvConflict, updateKv } from '@parley/kit';

/** A current member in the control view. */
export interface MemberRecord {
  role: MemberRole;
  delivery: DeliveryFilter;
  joinedSeq: number;
  joinedAt: string;
  invitedBy?: string;
  mark?: string;
}

/** The control view of a room. */
export interface RoomRecord {
  id: string;
  title: string;
  owner: string;
  direct: boolean;
  policy: RoomPolicy;
  closed: boolean;
  paused: boolean;
  /** Why it is paused (absent when not paused). */
  pausedReason?: string;
  createdAt: string;
  createdSeq: number;
  partition: number;
  members: Record<string, MemberRecord>;
  /** Participants who left by themselves (they may join again); removed ones are not listed. */
  left: string[];
  lastSeq: number;
  /** A participant's notice room (notices.ts): it is the only member, nobody can be invited. */
  notices?: true;
}

/** One membership interval in log positions; `to` is the position of the leave (inclusive). */
export type Interval = [from: number, to?: number];

/** The fan-out's view of a room. */
export interface FanoutRecord {
  closed: boolean;
  members: Record<string, { delivery: DeliveryFilter; role: MemberRole; intervals: Interval[] }>;
  /** Log position of the last membership/room event applied. */
  appliedSeq: number;
}

export const keys = {
  room: (id: string) => `room.${id}`,
  member: (participant: string, room: string) => `member.${participant}.${room}`,
  memberPrefix: (participant: string) => `member.${participant}.*`,
  fanout: (id: string) => `fanout.${id}`,
};

const enc = new TextEncoder();

function parse<T>(e: KvEntry | null): { value: T; revision: number } | undefined {
  if (e?.operation !== 'PUT' || e.length === 0) return undefined;
  return { value: e.json<T>(), revision: e.revision };
}

/** Reads a JSON entry with its revision. */
export async function readEntry<T>(kv: KV, key: string): Promise<{ value: T; revision: number } | undefined> {
  return parse<T>(await kv.get(key));
}

/** Creates `key` with `value`; CONFLICT when it exists. */
export async function createEntry(kv: KV, key: string, value: unknown): Promise<number> {
  try {
    return await kv.create(key, enc.encode(JSON.stringify(value)));
  } catch (err) {
    if (isKvConflict(err)) throw new ParleyError('CONFLICT', `${key} already exists`);
    throw err;
  }
}

/**
 * Read-modify-write with compare-and-set, retried on conflicts. `change` returns the new value, or
 * `undefined` to leave the entry as it is.
 */
export async function updateEntry<T>(
  kv: KV,
  key: string,
  change: (current: T | undefined) => T | undefined,
  attempts = 20,
): Promise<T | undefined> {
  return (await updateKv<T>(kv, key, change, { attempts })).value;
}

/** The API shape of a member. */
export function toRoomMember(id: string, m: MemberRecord): RoomMember {
  return {
    id,
    role: m.role,
    delivery: m.delivery,
    joinedSeq: m.joinedSeq,
    joinedAt: m.joinedAt,
    ...(m.invitedBy ? { invitedBy: m.invitedBy } : {}),
    ...(m.mark ? { mark: m.mark } : {}),
  };
}

/** The API shape of a room. */
export function toRoom(r: RoomRecord): Room {
  return {
    id: r.id,
    title: r.title,
    owner: r.owner,
    direct: r.direct,
    policy: r.policy,
    closed: r.closed,
    paused: r.paused,
    createdAt: r.createdAt,
    members: Object.entries(r.members)
      .map(([id, m]) => toRoomMember(id, m))
      .sort((a, b) => a.joinedSeq - b.joinedSeq),
    lastSeq: r.lastSeq,
  };
}

/** Whether a member with `intervals` was in the room at log position `seq`. */
export function memberAt(intervals: Interval[], seq: number): boolean {
  for (const [from, to] of intervals) if (from <= seq && (to === undefined || seq <= to)) return true;
  return false;
}
