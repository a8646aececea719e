/**
 * The room control plane: lifecycle, membership and history. Every change is first appended to the
 * room's own log (so who receives a message is decided by its position in the log), then reflected
 * in the control view in `parley_rooms` with compare-and-set.
 */
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import {
  type ApiParsedRequest,
  type ApiResponse,
  activeTraceIds,
  type HistoryEntry,
  isServiceId,
  type MembershipChange,
  newId,
  ParleyError,
  type PrincipalId,
  participantKind,
  partitionOf,
  type Room,
  type RoomChange,
  type RoomMember,
  RoomMessage,
  RoomPolicy,
  type roomsApi,
} from '@parley/contracts';
import type { Logger } from '@parley/kit';
import {
  appendAudit,
  isJetStreamUnavailable,
  JetStreamUnavailableError,
  publishEvent,
  retryJetStream,
} from '@parley/kit';
import type { ConsentGate } from './consent.js';
import type { ParticipantDirectory } from './participants.js';
import { appendEntry, firstPosition, lastPosition, nextPosition, readLog, systemEntry } from './room-log.js';
import {
  createEntry,
  keys,
  type MemberRecord,
  type RoomRecord,
  readEntry,
  toRoom,
  toRoomMember,
  updateEntry,
} from './room-store.js';

type Req<M extends keyof typeof roomsApi> = ApiParsedRequest<(typeof roomsApi)[M]>;
type Res<M extends keyof typeof roomsApi> = ApiResponse<(typeof roomsApi)[M]>;

/** What the control plane needs. */
export interface ControlDeps {
  js: JetStreamClient;
  jsm: JetStreamManager;
  kv: KV;
  partitions: number;
  participants: ParticipantDirectory;
  /** Refuses with NO_CONSENT to bring a participant of another owner in without consent. */
  consent: ConsentGate;
  log: Logger;
}

const dec = new TextDecoder();

/**
 * The most stored message bytes one page of history carries: the reply has to fit in NATS's
 * `max_payload` (1 MiB) with its envelope, so a page of large messages holds fewer than `limit`
 * and says `more` (a page always holds at least one entry; one message is at most 1,000,000 bytes).
 */
const HISTORY_PAGE_BYTES = 896 * 1024;

/** Whether one more entry of `size` bytes fits a page that holds `count` so far (the first always does). */
function historyPageBudget() {
  let bytes = 0;
  return (size: number, count: number) => {
    if (count > 0 && bytes + size > HISTORY_PAGE_BYTES) return false;
    bytes += size;
    return true;
  };
}

/**
 * How long `rooms.create` keeps retrying one of its JetStream writes while the server does not
 * answer (a PubAck or KV write timing out on a loaded server).
 */
export const CREATE_WRITE_DEADLINE_MS = 15_000;

/** Builds the control-plane handlers. */
export function createControlPlane(deps: ControlDeps) {
  const { js, jsm, kv } = deps;

  async function load(roomId: string): Promise<RoomRecord> {
    const e = await readEntry<RoomRecord>(kv, keys.room(roomId));
    if (!e) throw new ParleyError('NOT_FOUND', `room ${roomId} does not exist`);
    return e.value;
  }

  function requireMember(r: RoomRecord, caller: string): MemberRecord {
    const m = r.members[caller];
    if (!m) throw new ParleyError('NOT_A_MEMBER', `${caller} is not a member of room ${r.id}`);
    return m;
  }

  function requireOpen(r: RoomRecord): void {
    if (r.closed) throw new ParleyError('ROOM_CLOSED', `room ${r.id} is closed`);
  }

  function requireOwner(r: RoomRecord, caller: string, what: string): void {
    if (r.owner !== caller) throw new ParleyError('PERMISSION_DENIED', `only the room owner may ${what}`);
  }

  /** Every membership change is an audit record (domain `membership`) pointing at its log entry. */
  async function auditMembership(room: string, change: MembershipChange, message: string, seq: number) {
    const trace = activeTraceIds();
    await appendAudit(js, {
      domain: 'membership',
      action: change.change,
      actor: change.by as PrincipalId,
      target: change.member,
      room,
      message,
      ...(trace ? { traceId: trace.traceId } : {}),
      data: {
        role: change.role,
        delivery: change.delivery,
        seq,
        ...(change.mark ? { mark: change.mark } : {}),
      },
    }).catch((err) => deps.log.warn({ err }, 'membership change not audited'));
  }

  /** Appends a membership change and applies it to the control view. */
  async function changeMembership(
    r: RoomRecord,
    change: MembershipChange,
    apply: (room: RoomRecord, seq: number) => void,
  ): Promise<{ seq: number; room: RoomRecord }> {
    const entry = systemEntry(r.id, change.by, 'membership', change, { mentions: [change.member] });
    const { seq } = await appendEntry(js, r, entry);
    await auditMembership(r.id, change, entry.id, seq);
    const room = await updateEntry<RoomRecord>(kv, keys.room(r.id), (current) => {
      if (!current) return undefined;
      apply(current, seq);
      current.lastSeq = Math.max(current.lastSeq, seq);
      return current;
    });
    await publishEvent(js, 'rooms', 'member.changed', {
      actor: change.by,
      subject: r.id,
      data: { ...change, seq },
    }).catch((err) => deps.log.warn({ err }, 'event not published'));
    return { seq, room: room ?? r };
  }

  async function addMember(
    r: RoomRecord,
    member: string,
    by: string,
    role: MemberRecord['role'],
    delivery: MemberRecord['delivery'],
  ): Promise<RoomMember> {
    const { seq, room } = await changeMembership(
      r,
      { change: 'joined', member, role, delivery, by },
      (room, seq) => {
        room.members[member] ??= {
          role,
          delivery,
          joinedSeq: seq,
          joinedAt: new Date().toISOString(),
          ...(by !== member ? { invitedBy: by } : {}),
        };
        room.left = room.left.filter((id) => id !== member);
      },
    );
    await kv.put(keys.member(member, r.id), JSON.stringify({ role, joinedSeq: seq }));
    const m = room.members[member];
    if (!m) throw new ParleyError('INTERNAL', 'membership was not recorded');
    return toRoomMember(member, m);
  }

  async function dropMember(
    r: RoomRecord,
    member: string,
    by: string,
    change: 'left' | 'removed',
  ): Promise<number> {
    const m = r.members[member];
    if (!m) throw new ParleyError('NOT_A_MEMBER', `${member} is not a member of room ${r.id}`);
    const { seq } = await changeMembership(
      r,
      { change, member, role: m.role, delivery: m.delivery, by },
      (room) => {
        delete room.members[member];
        if (change === 'left' && !room.left.includes(member)) room.left.push(member);
      },
    );
    await kv.delete(keys.member(member, r.id));
    return seq;
  }

  return {
    async create(req: Req<'create'>, caller: string): Promise<Res<'create'>> {
      const invited = [...new Set(req.members.filter((m) => m !== caller))];
      if (req.direct && invited.length !== 1) {
        throw new ParleyError('INVALID_ARGUMENT', 'a direct room has exactly one other member');
      }
      // Checked together, not one round trip after another: creating a room of 8 was ~30 sequential
      // JetStream and service round trips, the slowest step of onboarding (pnpm bench:scale).
      await Promise.all([caller, ...invited].map((m) => deps.participants.require(m)));
      await Promise.all(invited.map((m) => deps.consent(caller, m)));
      const id = newId('room');
      const partition = partitionOf(id, deps.partitions);
      const policy = RoomPolicy.parse(req.policy ?? {});
      // Each write is retried while JetStream does not answer: a log append carries its entry's id
      // (the stream drops a second copy and acks the first one's position), the room record is
      // created under a new id (a conflict on a retry is the earlier try's), member keys are puts.
      // The room exists once its record does: a failure before that is UNAVAILABLE (nothing a
      // caller can see was made: retry), at or after it DEADLINE_EXCEEDED (it may exist).
      let committed = false;
      const write = <T>(what: string, fn: () => Promise<T>) =>
        retryJetStream(`${what} of new room ${id}`, fn, { deadlineMs: CREATE_WRITE_DEADLINE_MS }).catch(
          (err) => {
            if (!(err instanceof JetStreamUnavailableError) && !isJetStreamUnavailable(err)) throw err;
            deps.log.warn({ err, room: id, committed }, 'room create: JetStream did not answer a write');
            throw committed
              ? new ParleyError(
                  'DEADLINE_EXCEEDED',
                  `room ${id} was created but not all of it was written in time (${(err as Error).message}): list your rooms before creating it again`,
                  { cause: err, details: { room: id } },
                )
              : new ParleyError(
                  'UNAVAILABLE',
                  `the room could not be created now (${(err as Error).message}); it does not exist: try again`,
                  { cause: err, retryAfterMs: 1_000 },
                );
          },
        );
      const created: RoomChange = { change: 'created', by: caller, title: req.title };
      const createdEntry = systemEntry(id, caller, 'room', created);
      const { seq: createdSeq } = await write('the first log entry', () =>
        appendEntry(js, { id, partition }, createdEntry),
      );
      const now = new Date().toISOString();
      const record: RoomRecord = {
        id,
        title: req.title,
        owner: caller,
        direct: req.direct,
        policy,
        closed: false,
        paused: false,
        createdAt: now,
        createdSeq,
        partition,
        members: {},
        left: [],
        lastSeq: createdSeq,
      };
      // Members join by events in the log, in order: the owner first. Their audit records (which
      // never fail the change) are written meanwhile.
      const audits: Promise<void>[] = [];
      for (const [member, role] of [
        [caller, 'owner'] as const,
        ...invited.map((m) => [m, 'member'] as const),
      ]) {
        const change: MembershipChange = { change: 'joined', member, role, delivery: 'all', by: caller };
        const entry = systemEntry(id, caller, 'membership', change, { mentions: [member] });
        const { seq } = await write('a membership entry', () => appendEntry(js, { id, partition }, entry));
        audits.push(auditMembership(id, change, entry.id, seq));
        record.members[member] = {
          role,
          delivery: 'all',
          joinedSeq: seq,
          joinedAt: now,
          ...(member !== caller ? { invitedBy: caller } : {}),
        };
        record.lastSeq = seq;
      }
      await Promise.all(audits);
      // From the first try of the record on, the room may exist (a write that timed out may be stored).
      committed = true;
      let tries = 0;
      await write('the room record', async () => {
        tries++;
        try {
          await createEntry(kv, keys.room(id), record);
        } catch (err) {
          // The id is new: a record there is this create's earlier try, stored but not acked.
          if (tries === 1 || (err as ParleyError).code !== 'CONFLICT') throw err;
        }
      });
      await Promise.all(
        Object.entries(record.members).map(([member, m]) =>
          write('a member key', () =>
            kv.put(keys.member(member, id), JSON.stringify({ role: m.role, joinedSeq: m.joinedSeq })),
          ),
        ),
      );
      await publishEvent(js, 'rooms', 'created', {
        actor: caller,
        subject: id,
        data: { title: req.title },
      }).catch((err) => deps.log.warn({ err }, 'event not published'));
      return toRoom(record);
    },

    async get(req: Req<'get'>, caller: string): Promise<Room> {
      const r = await load(req.room);
      requireMember(r, caller);
      return toRoom(r);
    },

    async list(req: Req<'list'>, caller: string): Promise<Res<'list'>> {
      const prefix = `member.${caller}.`;
      const ids: string[] = [];
      for await (const k of await kv.keys(keys.memberPrefix(caller))) ids.push(k.slice(prefix.length));
      ids.sort();
      const start = req.cursor ? ids.findIndex((id) => id > (req.cursor as string)) : 0;
      const rooms: Res<'list'>['rooms'] = [];
      let i = start < 0 ? ids.length : start;
      for (; i < ids.length && rooms.length < req.limit; i++) {
        const e = await readEntry<RoomRecord>(kv, keys.room(ids[i] as string));
        const r = e?.value;
        const m = r?.members[caller];
        if (!r || !m || (r.closed && !req.includeClosed)) continue;
        rooms.push({
          id: r.id,
          title: r.title,
          owner: r.owner,
          role: m.role,
          direct: r.direct,
          closed: r.closed,
          memberCount: Object.keys(r.members).length,
          createdAt: r.createdAt,
        });
      }
      const last = rooms.at(-1);
      return { rooms, ...(i < ids.length && last ? { next: last.id } : {}) };
    },

    async invite(req: Req<'invite'>, caller: string): Promise<RoomMember> {
      const r = await load(req.room);
      const me = requireMember(r, caller);
      requireOpen(r);
      if (r.policy.whoMayInvite === 'owner' && r.owner !== caller) {
        throw new ParleyError('PERMISSION_DENIED', 'only the room owner may invite to this room');
      }
      if (me.role === 'observer') throw new ParleyError('PERMISSION_DENIED', 'observers may not invite');
      if (r.direct) throw new ParleyError('PERMISSION_DENIED', 'a direct room has exactly two members');
      if (r.notices) throw new ParleyError('PERMISSION_DENIED', 'a notice room has its participant only');
      const existing = r.members[req.participant];
      if (existing) return toRoomMember(req.participant, existing);
      await deps.participants.require(req.participant);
      await deps.consent(caller, req.participant);
      return addMember(r, req.participant, caller, req.role, req.delivery);
    },

    async join(req: Req<'join'>, caller: string): Promise<RoomMember> {
      const r = await load(req.room);
      requireOpen(r);
      const existing = r.members[caller];
      if (existing) return toRoomMember(caller, existing);
      if (!r.left.includes(caller)) {
        throw new ParleyError(
          'NOT_A_MEMBER',
          `${caller} was not a member of room ${r.id}: ask a member to invite you`,
        );
      }
      return addMember(r, caller, caller, 'member', 'all');
    },

    async leave(req: Req<'leave'>, caller: string): Promise<Res<'leave'>> {
      const r = await load(req.room);
      requireMember(r, caller);
      if (r.owner === caller && !r.closed) {
        throw new ParleyError('PERMISSION_DENIED', 'the owner cannot leave an open room: close it instead');
      }
      return { room: r.id, seq: await dropMember(r, caller, caller, 'left') };
    },

    async remove(req: Req<'remove'>, caller: string): Promise<Res<'remove'>> {
      const r = await load(req.room);
      requireMember(r, caller);
      requireOwner(r, caller, 'remove members');
      if (req.participant === r.owner)
        throw new ParleyError('INVALID_ARGUMENT', 'the owner cannot be removed');
      return { room: r.id, seq: await dropMember(r, req.participant, caller, 'removed') };
    },

    async setMember(req: Req<'setMember'>, caller: string): Promise<RoomMember> {
      const r = await load(req.room);
      requireMember(r, caller);
      requireOpen(r);
      const target = r.members[req.participant];
      if (!target)
        throw new ParleyError('NOT_A_MEMBER', `${req.participant} is not a member of room ${r.id}`);
      if (req.role === undefined && req.delivery === undefined) {
        throw new ParleyError('INVALID_ARGUMENT', 'give a role or a delivery filter to change');
      }
      if (req.role !== undefined) {
        requireOwner(r, caller, 'change roles');
        if (req.participant === r.owner)
          throw new ParleyError('INVALID_ARGUMENT', 'the owner’s role is owner');
      }
      if (req.delivery !== undefined && caller !== req.participant && caller !== r.owner) {
        throw new ParleyError(
          'PERMISSION_DENIED',
          'only the member itself or the owner may change its delivery filter',
        );
      }
      const role = req.role ?? target.role;
      const delivery = req.delivery ?? target.delivery;
      const { room } = await changeMembership(
        r,
        { change: 'updated', member: req.participant, role, delivery, by: caller },
        (room) => {
          const m = room.members[req.participant];
          if (m) {
            m.role = role;
            m.delivery = delivery;
          }
        },
      );
      const m = room.members[req.participant];
      if (!m) throw new ParleyError('NOT_A_MEMBER', `${req.participant} left meanwhile`);
      return toRoomMember(req.participant, m);
    },

    async close(req: Req<'close'>, caller: string): Promise<Room> {
      const r = await load(req.room);
      requireMember(r, caller);
      requireOwner(r, caller, 'close the room');
      if (r.closed) return toRoom(r);
      const change: RoomChange = { change: 'closed', by: caller };
      const { seq } = await appendEntry(js, r, systemEntry(r.id, caller, 'room', change));
      const room = await updateEntry<RoomRecord>(kv, keys.room(r.id), (current) => {
        if (!current) return undefined;
        current.closed = true;
        current.lastSeq = Math.max(current.lastSeq, seq);
        return current;
      });
      await publishEvent(js, 'rooms', 'closed', { actor: caller, subject: r.id }).catch((err) =>
        deps.log.warn({ err }, 'event not published'),
      );
      return toRoom(room ?? r);
    },

    /**
     * Pauses a room for agents: a `room` entry `paused` in the log, the control view's `paused` (the
     * ingress refuses agents' sends from then on), a private notice to the owner and the human
     * members, an event and an audit record. `msgId` makes a repeated pause (a fan-out re-run) one.
     */
    async pause(
      req: Req<'pause'>,
      caller: string,
      o: { msgId?: string; data?: Record<string, unknown> } = {},
    ): Promise<Room> {
      const r = await load(req.room);
      if (!isServiceId(caller)) {
        requireMember(r, caller);
        if (r.owner !== caller && participantKind(caller) !== 'human') {
          throw new ParleyError(
            'PERMISSION_DENIED',
            'only the owner, a human member or a service may pause a room',
          );
        }
      }
      requireOpen(r);
      if (r.paused) return toRoom(r);
      const change: RoomChange = { change: 'paused', by: caller, reason: req.reason };
      const entry = systemEntry(r.id, caller, 'room', change);
      const { seq } = await appendEntry(js, r, entry, o.msgId ?? entry.id);
      const room = await updateEntry<RoomRecord>(kv, keys.room(r.id), (current) => {
        if (!current) return undefined;
        current.paused = true;
        current.pausedReason = req.reason;
        current.lastSeq = Math.max(current.lastSeq, seq);
        return current;
      });
      const notify = [
        ...new Set([r.owner, ...Object.keys(r.members).filter((m) => participantKind(m) === 'human')]),
      ];
      const notice = systemEntry(
        r.id,
        caller,
        'system',
        { event: 'room.paused', by: caller, reason: req.reason, ...o.data },
        { mentions: notify, audience: 'mentions' },
      );
      notice.parts.unshift({
        type: 'text',
        text: `Room "${r.title}" is paused for agents: ${req.reason}. A human member can resume it: parley room resume ${r.id}`,
      });
      await appendEntry(js, r, notice, `pause-notice:${r.id}:${seq}`);
      await publishEvent(js, 'rooms', 'paused', {
        actor: caller,
        subject: r.id,
        data: { owner: r.owner, reason: req.reason, notify, seq, ...o.data },
      }).catch((err) => deps.log.warn({ err }, 'event not published'));
      const trace = activeTraceIds();
      await appendAudit(js, {
        domain: 'policy',
        action: 'room.pause',
        actor: caller as PrincipalId,
        room: r.id,
        message: entry.id,
        ...(trace ? { traceId: trace.traceId } : {}),
        data: { reason: req.reason, seq, ...o.data },
      }).catch((err) => deps.log.warn({ err }, 'pause not audited'));
      return toRoom(room ?? r);
    },

    /** Resumes a paused room (a human member or a service): agents may send again. */
    async resume(req: Req<'resume'>, caller: string): Promise<Room> {
      const r = await load(req.room);
      if (!isServiceId(caller)) {
        requireMember(r, caller);
        if (participantKind(caller) !== 'human') {
          throw new ParleyError('PERMISSION_DENIED', 'only a human member may resume a paused room');
        }
      }
      if (!r.paused) return toRoom(r);
      const change: RoomChange = { change: 'resumed', by: caller, reason: req.reason };
      const entry = systemEntry(r.id, caller, 'room', change);
      const { seq } = await appendEntry(js, r, entry);
      const room = await updateEntry<RoomRecord>(kv, keys.room(r.id), (current) => {
        if (!current) return undefined;
        current.paused = false;
        delete current.pausedReason;
        current.lastSeq = Math.max(current.lastSeq, seq);
        return current;
      });
      await publishEvent(js, 'rooms', 'resumed', {
        actor: caller,
        subject: r.id,
        data: { owner: r.owner, reason: req.reason, seq },
      }).catch((err) => deps.log.warn({ err }, 'event not published'));
      const trace = activeTraceIds();
      await appendAudit(js, {
        domain: 'policy',
        action: 'room.resume',
        actor: caller as PrincipalId,
        room: r.id,
        message: entry.id,
        ...(trace ? { traceId: trace.traceId } : {}),
        data: { reason: req.reason, seq },
      }).catch((err) => deps.log.warn({ err }, 'resume not audited'));
      return toRoom(room ?? r);
    },

    /** Services only: which of `participants` are members. */
    /**
     * Which of `candidates` may read `message` (at log position `seq`) now: current members of its
     * room whose history policy reaches that far back, and, for a mentions-only message, its sender
     * and those it mentions — what `history` would show each of them.
     */
    async readersOf(message: RoomMessage, seq: number, candidates: string[]): Promise<string[]> {
      const r = (await readEntry<RoomRecord>(kv, keys.room(message.room)))?.value;
      if (!r) return [];
      return candidates.filter((p) => {
        const m = r.members[p];
        if (!m) return false;
        if (r.policy.history === 'since_joined' && m.joinedSeq > seq) return false;
        return message.audience !== 'mentions' || message.mentions.includes(p) || message.sender.id === p;
      });
    },

    async members(req: Req<'members'>): Promise<Res<'members'>> {
      const r = await load(req.room);
      return {
        room: r.id,
        members: req.participants.filter((p) => r.members[p] !== undefined),
        owner: r.owner,
        paused: r.paused,
        closed: r.closed,
      };
    },

    /**
     * `member` and `other` stopped being contacts: in every open room where one brought the other
     * in, the room's `onContactRevoked` policy applies — `stay` (marked) or `remove`.
     */
    async contactRevoked(req: Req<'contactRevoked'>): Promise<Res<'contactRevoked'>> {
      const out: Res<'contactRevoked'> = { marked: [], removed: [] };
      for (const [member, other] of [
        [req.a, req.b],
        [req.b, req.a],
      ] as const) {
        const prefix = `member.${member}.`;
        const rooms: string[] = [];
        for await (const k of await kv.keys(keys.memberPrefix(member))) rooms.push(k.slice(prefix.length));
        for (const id of rooms) {
          const r = (await readEntry<RoomRecord>(kv, keys.room(id)))?.value;
          const m = r?.members[member];
          if (!r || !m || r.closed || m.invitedBy !== other) continue;
          if (r.policy.onContactRevoked === 'remove') {
            await dropMember(r, member, req.by, 'removed');
            out.removed.push({ room: r.id, member });
            continue;
          }
          const mark = `contact with ${other} revoked`;
          if (m.mark === mark) continue;
          await changeMembership(
            r,
            { change: 'updated', member, role: m.role, delivery: m.delivery, by: req.by, mark },
            (room) => {
              const current = room.members[member];
              if (current) current.mark = mark;
            },
          );
          out.marked.push({ room: r.id, member });
        }
      }
      return out;
    },

    async history(req: Req<'history'>, caller: string): Promise<Res<'history'>> {
      const r = await load(req.room);
      const me = requireMember(r, caller);
      const start = r.policy.history === 'since_joined' ? me.joinedSeq : r.createdSeq;
      const last = await lastPosition(jsm, r);
      // The entry at `start` is the room's own (its creation, or the caller's join): when it is no
      // longer stored, retention removed the room's oldest entries up to the first one still there.
      const first = await firstPosition(jsm, r, start);
      const retainedFrom = first === start ? undefined : first || (await nextPosition(jsm));
      if (retainedFrom !== undefined) {
        // A cursor into what was removed: refused, so a reader never takes the rest for all there was.
        const from = req.after !== undefined && req.after > 0 ? Math.max(start, req.after + 1) : undefined;
        const stale =
          (from !== undefined && from < retainedFrom) ||
          (req.before !== undefined && req.before > start && req.before <= retainedFrom);
        if (stale) {
          throw new ParleyError(
            'HISTORY_EXPIRED',
            `history of room ${r.id} is retained from position ${retainedFrom} on: older entries were removed by the room log's retention limits, and entries ${req.before !== undefined && req.before <= retainedFrom ? `before ${req.before}` : `after ${req.after}`} may be among them`,
            {
              details: {
                room: r.id,
                retainedFrom,
                ...(req.after !== undefined ? { after: req.after } : {}),
                ...(req.before !== undefined ? { before: req.before } : {}),
              },
            },
          );
        }
      }
      const floor = retainedFrom ?? start;
      const flag = retainedFrom !== undefined ? { retainedFrom } : {};
      const visible = (m: RoomMessage) => m.audience !== 'mentions' || m.mentions.includes(caller);
      const toEntry = (seq: number, data: Uint8Array): HistoryEntry => ({
        seq,
        message: RoomMessage.parse(JSON.parse(dec.decode(data))),
      });
      if (req.order === 'oldest') {
        const from = Math.max(floor, (req.after ?? 0) + 1);
        const to = Math.min(last, (req.before ?? Number.MAX_SAFE_INTEGER) - 1);
        if (from > to) return { entries: [], more: false, ...flag };
        const entries: HistoryEntry[] = [];
        let cursor = from;
        let more = false;
        // Private notices to others are skipped, so read until the page is full.
        const fits = historyPageBudget();
        fill: while (entries.length < req.limit && cursor <= to) {
          const page = await readLog(js, r, { from: cursor, to, limit: req.limit - entries.length });
          for (const m of page.entries) {
            const e = toEntry(m.seq, m.data);
            if (visible(e.message)) {
              if (!fits(m.data.length, entries.length)) {
                more = true;
                break fill;
              }
              entries.push(e);
            }
            cursor = m.seq + 1;
          }
          more = page.more;
          if (!page.more) break;
        }
        return { entries, more, ...flag };
      }
      // Newest first: read windows backwards from `before`, growing them until the page is full.
      const to = Math.min(last, (req.before ?? Number.MAX_SAFE_INTEGER) - 1);
      const lo = Math.max(floor, (req.after ?? 0) + 1);
      if (lo > to) return { entries: [], more: false, ...flag };
      let window = Math.max(req.limit * 8, 256);
      for (;;) {
        const from = Math.max(lo, to - window + 1);
        const collected: { entry: HistoryEntry; bytes: number }[] = [];
        let cursor = from;
        for (;;) {
          const page = await readLog(js, r, { from: cursor, to, limit: 256 });
          for (const m of page.entries) {
            const entry = toEntry(m.seq, m.data);
            if (visible(entry.message)) collected.push({ entry, bytes: m.data.length });
            cursor = m.seq + 1;
          }
          if (!page.more) break;
        }
        // One entry beyond the page tells whether there is more.
        if (collected.length > req.limit || from === lo) {
          const entries: HistoryEntry[] = [];
          const fits = historyPageBudget();
          for (const c of collected.slice(-req.limit).reverse()) {
            if (!fits(c.bytes, entries.length)) break;
            entries.push(c.entry);
          }
          return { entries, more: collected.length > entries.length, ...flag };
        }
        window *= 4;
      }
    },
  };
}

export type ControlPlane = ReturnType<typeof createControlPlane>;
