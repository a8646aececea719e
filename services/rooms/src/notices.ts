/**
 * Notice rooms: each participant that gets a notice from a Parley service (today: contact requests
 * and their outcomes, from the consent service) has one room whose only member is itself, created
 * on first use. A notice is a `system` entry in that room's log, so it reaches the participant's
 * inbox through the ordinary fan-out — ordered, durable, backfilled after a gap, readable in
 * history — and nothing else (no second delivery path) had to be built. Nobody can be invited into
 * a notice room.
 *
 * `notices.<participantId>` in parley_rooms names the room. Two replicas creating it at once agree
 * through the create of that key; the room's first log entries carry fixed de-duplication ids, so
 * finishing a creation that crashed half-way is safe.
 */
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import {
  type ApiParsedRequest,
  type ApiResponse,
  isParleyError,
  type MembershipChange,
  newId,
  partitionOf,
  type RoomChange,
  RoomPolicy,
  type roomsApi,
} from '@parley/contracts';
import { updateKv } from '@parley/kit';
import type { ParticipantDirectory } from './participants.js';
import { appendEntry, storedMessageId, systemEntry } from './room-log.js';
import { createEntry, keys, type RoomRecord, readEntry } from './room-store.js';

/** The title every notice room has. */
export const NOTICE_ROOM_TITLE = 'Parley notices';

const noticesKey = (participant: string) => `notices.${participant}`;

/** Notices for participants. */
export function createNotices(o: {
  js: JetStreamClient;
  jsm: JetStreamManager;
  kv: KV;
  partitions: number;
  participants: ParticipantDirectory;
}) {
  /** Creates the room (idempotently: every step may have happened before). */
  async function build(participant: string, id: string): Promise<RoomRecord> {
    const partition = partitionOf(id, o.partitions);
    const at = { id, partition };
    const created: RoomChange = { change: 'created', by: participant, title: NOTICE_ROOM_TITLE };
    const { seq: createdSeq } = await appendEntry(
      o.js,
      at,
      systemEntry(id, 'svc_rooms', 'room', created),
      `notices:${id}:created`,
    );
    const joined: MembershipChange = {
      change: 'joined',
      member: participant,
      role: 'owner',
      delivery: 'all',
      by: 'svc_rooms',
    };
    const { seq: joinedSeq } = await appendEntry(
      o.js,
      at,
      systemEntry(id, 'svc_rooms', 'membership', joined, { mentions: [participant] }),
      `notices:${id}:joined`,
    );
    const now = new Date().toISOString();
    const record: RoomRecord = {
      id,
      title: NOTICE_ROOM_TITLE,
      owner: participant,
      direct: false,
      policy: RoomPolicy.parse({ whoMayInvite: 'owner' }),
      closed: false,
      paused: false,
      createdAt: now,
      createdSeq,
      partition,
      members: { [participant]: { role: 'owner', delivery: 'all', joinedSeq, joinedAt: now } },
      left: [],
      lastSeq: joinedSeq,
      notices: true,
    };
    await createEntry(o.kv, keys.room(id), record).catch((err: unknown) => {
      // Created meanwhile by another replica finishing the same claim.
      if (!isParleyError(err, 'CONFLICT')) throw err;
    });
    await o.kv.put(keys.member(participant, id), JSON.stringify({ role: 'owner', joinedSeq }));
    return (await readEntry<RoomRecord>(o.kv, keys.room(id)))?.value ?? record;
  }

  /** The participant's open notice room, created when it has none (or only a closed one). */
  async function noticeRoom(participant: string): Promise<RoomRecord> {
    let open: RoomRecord | undefined;
    let claimed = '';
    await updateKv<{ room: string }>(
      o.kv,
      noticesKey(participant),
      async (claim) => {
        open = undefined;
        if (claim) {
          const room = await readEntry<RoomRecord>(o.kv, keys.room(claim.room));
          // Claimed, but the room record is not written yet (a crash, or another replica on it).
          if (!room) claimed = claim.room;
          else if (!room.value.closed) open = room.value;
          if (!room?.value.closed) return undefined;
        }
        // None yet, or closed by its participant: claim a new one.
        claimed = newId('room');
        return { room: claimed };
      },
      { attempts: 10, what: `the notice room of ${participant}` },
    );
    return open ?? build(participant, claimed);
  }

  return {
    /** Appends a notice (`rooms.notify`); `caller` is the service that sends it. */
    async notify(
      req: ApiParsedRequest<typeof roomsApi.notify>,
      caller: string,
    ): Promise<ApiResponse<typeof roomsApi.notify>> {
      await o.participants.require(req.to);
      const room = await noticeRoom(req.to);
      const entry = systemEntry(room.id, caller, 'system', req.data, {
        mentions: [req.to],
        ...(req.provenance ? { provenance: req.provenance } : {}),
      });
      entry.parts.unshift({ type: 'text', text: req.text });
      const { seq, duplicate } = await appendEntry(o.js, room, entry, `notice:${req.key}`);
      // A retry: answer with the id stored the first time (never with this copy's, not stored).
      const id = duplicate ? await storedMessageId(o.jsm, seq) : entry.id;
      return { room: room.id, roomSeq: seq, id, duplicate };
    },
  };
}
