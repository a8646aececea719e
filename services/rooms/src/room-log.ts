/** Appending to and reading from the room log (stream PARLEY_ROOMS). */
import { DeliverPolicy, type JetStreamClient, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';
import { type MsgHdrs, headers as natsHeaders } from '@nats-io/transport-node';
import {
  encodeJson,
  headerNames,
  headerOf,
  idTime,
  newId,
  ParleyError,
  participantKind,
  type RoomMessage,
  setHeader,
  streams,
  subjects,
} from '@parley/contracts';

const dec = new TextDecoder();

/** Where a room's log lives. */
export interface RoomLocation {
  id: string;
  partition: number;
}

/** Routing headers of a log entry, so the fan-out never parses ordinary messages. */
export function entryHeaders(message: RoomMessage, h: MsgHdrs = natsHeaders()): MsgHdrs {
  setHeader(h, headerNames.kind, message.kind);
  setHeader(h, headerNames.sender, message.sender.id);
  setHeader(h, headerNames.messageId, message.id);
  if (message.mentions.length) setHeader(h, headerNames.mentions, message.mentions.join(','));
  if (message.audience === 'mentions') setHeader(h, headerNames.audience, 'mentions');
  if (message.trace) {
    setHeader(h, headerNames.traceparent, message.trace.traceparent);
    if (message.trace.tracestate) setHeader(h, headerNames.tracestate, message.trace.tracestate);
  }
  return h;
}

/** The sender record of a principal id. */
export function senderOf(id: string): RoomMessage['sender'] {
  return { id, kind: participantKind(id) ?? 'service' };
}

/** Builds a Parley-written entry (membership, room change, notice). */
export function systemEntry(
  room: string,
  actor: string,
  kind: 'membership' | 'room' | 'system',
  data: Record<string, unknown>,
  extra: Partial<RoomMessage> = {},
): RoomMessage {
  return {
    id: newId('message'),
    room,
    sender: senderOf(actor),
    kind,
    parts: [{ type: 'data', data }],
    mentions: [],
    hop: 0,
    sentAt: new Date().toISOString(),
    ...extra,
  };
}

/** Appends an entry; resolves with its log position. */
export async function appendEntry(
  js: JetStreamClient,
  room: RoomLocation,
  message: RoomMessage,
  msgId: string = message.id,
): Promise<{ seq: number; duplicate: boolean }> {
  const ack = await js.publish(subjects.room(room.partition, room.id), encodeJson(message), {
    msgID: msgId,
    headers: entryHeaders(message),
  });
  return { seq: ack.seq, duplicate: ack.duplicate };
}

/**
 * The id of the message stored at `seq` (the first copy of a de-duplicated retry), read from the
 * stream leader. Not a direct get: any replica answers those, and a follower still catching up
 * (e.g. after a cluster restart) answers "no message" for an entry it has not applied yet. Throws
 * when the entry cannot be read (the client retries with the same id): a retry must never be
 * answered with the id of the copy that was not stored, which no member would ever receive.
 * Retries are rare, so the leader round trip costs nothing on the send path.
 */
export async function storedMessageId(jsm: JetStreamManager, seq: number): Promise<string> {
  const stored = await jsm.streams.getMessage(streams.rooms, { seq });
  const id = stored ? (JSON.parse(dec.decode(stored.data)) as Partial<RoomMessage>).id : undefined;
  if (typeof id !== 'string') throw new Error(`room log entry ${seq} could not be read back`);
  return id;
}

/**
 * Reads a room's log entries with positions in [from, to], oldest first, at most `limit`, through an
 * ordered consumer filtered on the room's subject (the server skips other rooms' entries). The
 * range must hold an entry of the room (the history reads up to the room's last one): a fetch that
 * brings nothing before the read reached `to` or the consumer's end is refused UNAVAILABLE, never
 * answered as the whole range (a stream still recovering after a restart can let a fetch expire).
 */
export async function readLog(
  js: JetStreamClient,
  room: RoomLocation,
  range: { from: number; to?: number; limit: number },
): Promise<{ entries: JsMsg[]; more: boolean }> {
  const consumer = await js.consumers.get(streams.rooms, {
    filter_subjects: subjects.room(room.partition, room.id),
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: Math.max(1, range.from),
  });
  const entries: JsMsg[] = [];
  let more = false;
  try {
    for (;;) {
      const batch = await consumer.fetch({ max_messages: Math.min(range.limit + 1, 256), expires: 2000 });
      let got = 0;
      let exhausted = false;
      for await (const m of batch) {
        got++;
        if (range.to !== undefined && m.seq > range.to) {
          exhausted = true;
          break;
        }
        if (entries.length === range.limit) {
          more = true;
          exhausted = true;
          break;
        }
        entries.push(m);
        if (m.info.pending === 0 || (range.to !== undefined && m.seq >= range.to)) {
          exhausted = true;
          break;
        }
      }
      if (exhausted) break;
      if (got === 0) {
        throw new ParleyError(
          'UNAVAILABLE',
          `the room log did not answer a read of room ${room.id} from position ${entries.at(-1)?.seq ?? range.from} on`,
          { retryAfterMs: 500 },
        );
      }
    }
  } finally {
    await consumer.delete().catch(() => undefined);
  }
  return { entries, more };
}

/**
 * The log position of a room's newest entry, or 0. Read from the stream leader: a replica still
 * catching up after a restart answers a direct get with an older position or none, and a history
 * read bounded by it came back short without saying so (an agent backfilling a hole took it for all
 * there was).
 */
export async function lastPosition(jsm: JetStreamManager, room: RoomLocation): Promise<number> {
  const m = await jsm.streams.getMessage(streams.rooms, {
    last_by_subj: subjects.room(room.partition, room.id),
  });
  return m?.seq ?? 0;
}

/**
 * The log position of a room's first entry at or after `from` that is still stored, or 0 when none
 * is. Retention only ever removes a room's oldest entries (age, bytes and the per-room cap all drop
 * from the front), so what is retained of a room is everything from this position on. Read from
 * the stream leader: a replica catching up answers "none" for entries it has not applied yet, which
 * would read as retention having removed them.
 */
export async function firstPosition(
  jsm: JetStreamManager,
  room: RoomLocation,
  from: number,
): Promise<number> {
  // The leader's get takes `next_by_subj` (nats-server 2.9 on); nats.js types it for direct gets only.
  const query = { seq: Math.max(1, from), next_by_subj: subjects.room(room.partition, room.id) };
  const m = await jsm.streams.getMessage(streams.rooms, query as unknown as { seq: number });
  return m?.seq ?? 0;
}

/** The position the room log's next entry (of any room) will get. */
export async function nextPosition(jsm: JetStreamManager): Promise<number> {
  const info = await jsm.streams.info(streams.rooms);
  return info.state.last_seq + 1;
}

/** How far around a message id's time the log is searched. */
const FIND_BEFORE_MS = 5_000;
const FIND_AFTER_MS = 30_000;

/**
 * Finds a message of any room by its id, without an index: the id is a ULID made by the ingress
 * just before it stored the message, so only the stretch of the log stored around that time is
 * read, headers only (`Parley-Msg-Id`), and the one match is fetched whole. Costs nothing on the
 * send path; a lookup reads as many headers as the whole backbone stored in ~35 s around it.
 */
export async function findMessage(
  js: JetStreamClient,
  jsm: JetStreamManager,
  id: string,
): Promise<{ seq: number; data: Uint8Array } | undefined> {
  const t = idTime(id);
  if (!t) return undefined;
  const consumer = await js.consumers.get(streams.rooms, {
    deliver_policy: DeliverPolicy.StartTime,
    opt_start_time: new Date(t.getTime() - FIND_BEFORE_MS).toISOString(),
    headers_only: true,
  });
  const until = t.getTime() + FIND_AFTER_MS;
  let seq: number | undefined;
  try {
    for (let scanned = 0; seq === undefined && scanned < 2_000_000; ) {
      const batch = await consumer.fetch({ max_messages: 1_000, expires: 1_000 });
      let got = 0;
      let done = false;
      for await (const m of batch) {
        got++;
        scanned++;
        if (headerOf(m.headers, headerNames.messageId) === id) {
          seq = m.seq;
          break;
        }
        if (m.time.getTime() > until || m.info.pending === 0) {
          done = true;
          break;
        }
      }
      if (done || got === 0) break;
    }
  } finally {
    await consumer.delete().catch(() => undefined);
  }
  if (seq === undefined) return undefined;
  const stored = await jsm.direct.getMessage(streams.rooms, { seq });
  return stored ? { seq, data: stored.data } : undefined;
}
