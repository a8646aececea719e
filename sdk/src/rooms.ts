import type { MsgHdrs } from '@nats-io/transport-node';
import {
  type DeliveryFilter,
  decodeReply,
  encodeJson,
  HANDOFF_MEDIA_TYPE,
  Handoff,
  type HistoryEntry,
  injectContext,
  isParleyError,
  type MemberRole,
  newId,
  ParleyError,
  type Part,
  type Provenance,
  type Room,
  type RoomMember,
  type RoomPolicy,
  type RoomSummary,
  roomsApi,
  runInSpan,
  SendReply,
  type SendRequest,
  startMessagingSpan,
  subjects,
  traceAttributes,
} from '@parley/contracts';
import type * as z from 'zod';
import type { Agent } from './agent.js';
import { handling } from './handling.js';
import { retryIdempotent } from './retry.js';

/** Options of {@link RoomHandle.send}. */
export interface SendOptions {
  /** Participants to @mention (members with a mentions-only filter receive only these). */
  mentions?: string[];
  /** The message this one answers. */
  replyTo?: string;
  /** What kind of message. @default "message" (or "handoff" when `handoff` is given) */
  kind?: SendRequest['kind'];
  /** A structured handoff, sent as a data part of a `handoff` message. */
  handoff?: z.input<typeof Handoff>;
  /** Overrides the message that caused this one (by default: the delivery being handled). */
  causedBy?: string;
  /** Overrides the hop count (by default: the handled delivery's hop + 1, else 0). */
  hop?: number;
  /** Labels content that came from outside (rendered as data by receivers). */
  provenance?: Provenance;
  /**
   * A delegation token this message is sent under: as its current actor (acting for its principal),
   * or handing it to the next actor (after an exchange). Inside a handler the token the handled
   * message handed to this participant is used by default; `null` sends without one.
   */
  delegation?: string | null;
  task?: string;
  metadata?: Record<string, string>;
  /** The id that makes retries idempotent. @default a new ULID */
  clientMsgId?: string;
  /** How long to keep retrying while Parley is unreachable (or rate-limits the send), in ms. @default 30000 */
  deadlineMs?: number;
  /**
   * A send refused with `RATE_LIMITED` waits the `retryAfterMs` the ingress gives and is sent again
   * under the same client id, as long as that fits in `deadlineMs`; `false` throws the refusal at
   * once. @default true
   */
  retryRateLimited?: boolean;
}

/** Options of {@link RoomHandle.history}. */
export interface HistoryOptions {
  order?: 'newest' | 'oldest';
  before?: number;
  after?: number;
  limit?: number;
}

const RETRYABLE = new Set(['UNAVAILABLE', 'DEADLINE_EXCEEDED']);

/** A room, as seen by one participant. */
export class RoomHandle {
  constructor(
    private readonly agent: Agent,
    /** The room id. */
    readonly id: string,
  ) {}

  /**
   * Sends text or parts to the room. Resolves once the room log stored it, with its id and
   * position. While Parley is unreachable it retries under the same client id (so the message is
   * stored once) until `deadlineMs`. Inside a message handler, `causedBy` and `hop` are set from
   * the delivery being handled.
   */
  async send(content: string | Part[], options: SendOptions = {}): Promise<SendReply> {
    const parts: Part[] = typeof content === 'string' ? [{ type: 'text', text: content }] : [...content];
    if (options.handoff) {
      parts.push({ type: 'data', data: Handoff.parse(options.handoff), mediaType: HANDOFF_MEDIA_TYPE });
    }
    const ctx = handling.getStore();
    const req: SendRequest = {
      clientMsgId: options.clientMsgId ?? newId('message').slice(4),
      room: this.id,
      kind: options.kind ?? (options.handoff ? 'handoff' : 'message'),
      parts,
      mentions: options.mentions ?? [],
      hop: options.hop ?? (ctx ? ctx.hop + 1 : 0),
      ...(options.replyTo ? { replyTo: options.replyTo } : {}),
      ...((options.causedBy ?? ctx?.messageId) ? { causedBy: options.causedBy ?? ctx?.messageId } : {}),
      ...(options.provenance ? { provenance: options.provenance } : {}),
      ...((options.delegation === undefined ? ctx?.delegation : options.delegation)
        ? { delegation: (options.delegation ?? ctx?.delegation) as string }
        : {}),
      ...(options.task ? { task: options.task } : {}),
      ...(options.metadata ? { metadata: options.metadata } : {}),
    };
    return sendWithRetry(this.agent, req, {
      deadlineMs: options.deadlineMs ?? 30_000,
      retryRateLimited: options.retryRateLimited ?? true,
    });
  }

  /**
   * A page of the room's log (members only). `retainedFrom` is set when retention removed the room's
   * older entries; an `after` or `before` pointing into them is refused with `HISTORY_EXPIRED`
   * (`err.details.retainedFrom` says where retained history starts).
   */
  async history(
    options: HistoryOptions = {},
  ): Promise<{ entries: HistoryEntry[]; more: boolean; retainedFrom?: number }> {
    return this.agent.call(roomsApi.history, { room: this.id, ...options });
  }

  /** The room with its members. */
  get(): Promise<Room> {
    return this.agent.call(roomsApi.get, { room: this.id });
  }

  /** Adds a participant (consent is required across owners). */
  invite(
    participant: string,
    options: { role?: Exclude<MemberRole, 'owner'>; delivery?: DeliveryFilter } = {},
  ): Promise<RoomMember> {
    return this.agent.call(roomsApi.invite, { room: this.id, participant, ...options });
  }

  /** Removes a member (owner only). */
  remove(participant: string): Promise<{ room: string; seq: number }> {
    return this.agent.call(roomsApi.remove, { room: this.id, participant });
  }

  /** Changes a member's role (owner) or delivery filter (itself or the owner). */
  setMember(
    participant: string,
    change: { role?: Exclude<MemberRole, 'owner'>; delivery?: DeliveryFilter },
  ): Promise<RoomMember> {
    return this.agent.call(roomsApi.setMember, { room: this.id, participant, ...change });
  }

  /** Leaves the room. */
  leave(): Promise<{ room: string; seq: number }> {
    return this.agent.call(roomsApi.leave, { room: this.id });
  }

  /** Closes the room (owner only). */
  close(): Promise<Room> {
    return this.agent.call(roomsApi.close, { room: this.id });
  }
}

/**
 * One producer span around the whole send (retries included); its context travels in the request
 * headers, so the ingress, the fan-out and every delivery join the sender's trace.
 */
async function sendWithRetry(
  agent: Agent,
  req: SendRequest,
  retry: { deadlineMs: number; retryRateLimited: boolean },
): Promise<SendReply> {
  const subject = subjects.send(agent.id);
  const body = encodeJson(req);
  // The server refuses a publish past its max_payload outright: say so at once instead of retrying
  // an error that cannot go away (headers take a little room too).
  const maxPayload = agent.nc.info?.max_payload;
  if (maxPayload && body.length + 1_024 > maxPayload) {
    throw new ParleyError(
      'PAYLOAD_TOO_LARGE',
      `the message is ${body.length} bytes encoded; the NATS server accepts at most ${maxPayload} per message`,
      { details: { bytes: body.length, maxBytes: maxPayload } },
    );
  }
  const span = startMessagingSpan(agent.tracer, {
    operation: 'send',
    destination: subject,
    target: 'room',
    bodySize: body.length,
    attributes: { [traceAttributes.roomId]: req.room, [traceAttributes.sender]: agent.id },
  });
  const send = async () => {
    const reply = await retrying(agent, subject, body, injectContext(), retry);
    span?.setAttributes({ [traceAttributes.messageId]: reply.id, [traceAttributes.roomSeq]: reply.roomSeq });
    return reply;
  };
  return span ? runInSpan(span, send) : send();
}

async function retrying(
  agent: Agent,
  subject: string,
  body: Uint8Array,
  headers: MsgHdrs | undefined,
  retry: { deadlineMs: number; retryRateLimited: boolean },
): Promise<SendReply> {
  return retryIdempotent(
    async (remainingMs) => {
      const reply = await agent.replies.request(
        subject,
        body,
        Math.max(500, Math.min(5_000, remainingMs)),
        headers,
      );
      // The server answers a request nobody listens to with a 503 status.
      if (reply.headers?.code === 503) {
        throw new ParleyError('UNAVAILABLE', `nothing is serving ${subject}: is Parley running?`, {
          retryAfterMs: 500,
        });
      }
      return decodeReply(SendReply, reply, 'send reply');
    },
    {
      deadlineMs: retry.deadlineMs,
      retryable: (err) =>
        (isParleyError(err, 'RATE_LIMITED') && retry.retryRateLimited) ||
        (isParleyError(err) && RETRYABLE.has(err.code)),
      // Backpressure: wait as long as the ingress says, then the same id again (stored once).
      waitInFull: (err) => isParleyError(err, 'RATE_LIMITED'),
    },
  );
}

/** Room operations of a participant: `agent.rooms`. */
export class Rooms {
  constructor(private readonly agent: Agent) {}

  /** Creates a room owned by this participant, optionally with members. */
  async create(
    title: string,
    options: { members?: string[]; direct?: boolean; policy?: Partial<RoomPolicy> } = {},
  ): Promise<RoomHandle & { room: Room }> {
    const room = await this.agent.call(roomsApi.create, {
      title,
      members: options.members ?? [],
      direct: options.direct ?? false,
      ...(options.policy ? { policy: options.policy as RoomPolicy } : {}),
    });
    return Object.assign(new RoomHandle(this.agent, room.id), { room });
  }

  /** A handle on a room by id (no request is made). */
  room(id: string): RoomHandle {
    return new RoomHandle(this.agent, id);
  }

  /** A room with its members. */
  get(id: string): Promise<Room> {
    return this.room(id).get();
  }

  /** The rooms this participant is a member of (every page). */
  async list(options: { includeClosed?: boolean } = {}): Promise<RoomSummary[]> {
    const rooms: RoomSummary[] = [];
    let cursor: string | undefined;
    do {
      const page = await this.agent.call(roomsApi.list, {
        includeClosed: options.includeClosed ?? false,
        limit: 200,
        ...(cursor ? { cursor } : {}),
      });
      rooms.push(...page.rooms);
      cursor = page.next;
    } while (cursor);
    return rooms;
  }

  /** Invites a participant into a room. */
  invite(
    room: string,
    participant: string,
    options: { role?: Exclude<MemberRole, 'owner'>; delivery?: DeliveryFilter } = {},
  ): Promise<RoomMember> {
    return this.room(room).invite(participant, options);
  }

  /** Joins a room again after leaving it. */
  join(room: string): Promise<RoomMember> {
    return this.agent.call(roomsApi.join, { room });
  }

  /** Leaves a room. */
  leave(room: string): Promise<{ room: string; seq: number }> {
    return this.room(room).leave();
  }
}
