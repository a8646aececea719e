/**
 * Live delivery: the caller's inbox over a WebSocket (`/v1/stream`) or server-sent events
 * (`/v1/stream/sse`), in inbox order, with the SDK's guarantees.
 *
 * - Deliveries come from the SDK delivery engine in pull mode on the principal's own connection; a
 *   batch is acknowledged only after every frame of it was written to the socket (the write
 *   callback), so a connection that dies mid-batch leaves the rest unacknowledged: redelivered.
 * - Each frame carries `cursor`: an opaque token of the last position per room this stream has
 *   delivered (and when). A client resumes with the cursor of the last frame it handled
 *   (`?cursor=` on the WebSocket, `Last-Event-ID` for SSE): whatever was written and acknowledged
 *   after that (frames lost with the connection) is read back from the room log first, then live
 *   deliveries continue; anything at or below a room's resumed position is dropped. So across a
 *   reconnect nothing is lost and nothing comes twice.
 * - What was acknowledged per room is kept in `parley_gateway` (`cursor.<participant>`), so a
 *   resume works on any gateway replica.
 * - One stream per principal: a new one replaces the old (closed with 4000 "replaced").
 */
import { type ApiResponse, isParleyError, ParleyError, roomsApi } from '@parley/contracts';
import { updateKv } from '@parley/kit';
import { type Agent, deliveryEventOf, type PulledDelivery, type RetentionGap } from '@parley/sdk';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { WebSocket } from 'ws';
import * as z from 'zod';
import { authenticateRequest, requireScope } from './http.js';
import type { GatewayService, Principal } from './service.js';

/** What is kept per participant: per room the first and last position acknowledged, and when it first was. */
const AckedCursor = z.object({
  rooms: z.record(z.string(), z.object({ first: z.int(), last: z.int(), at: z.number() })),
});
type AckedCursor = z.infer<typeof AckedCursor>;

/** What a client's cursor token says: positions per room, and when the frame was made. */
interface ClientCursor {
  p: Record<string, number>;
  t: number;
}

/** Encodes a cursor token. */
export function encodeCursor(c: ClientCursor): string {
  return Buffer.from(JSON.stringify(c)).toString('base64url');
}

/** Decodes a cursor token (INVALID_ARGUMENT when it is not one). */
export function decodeCursor(token: string): ClientCursor {
  try {
    const c = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as ClientCursor;
    if (typeof c.t !== 'number' || typeof c.p !== 'object' || c.p === null) throw new Error('shape');
    for (const v of Object.values(c.p)) if (!Number.isInteger(v) || v < 0) throw new Error('position');
    return c;
  } catch {
    throw new ParleyError('INVALID_ARGUMENT', 'the cursor is not one this gateway made');
  }
}

/** How long a principal's consumer keeps running after its stream ended (a reconnect continues at once). */
const STREAM_LINGER_MS = 30_000;

/** A frame of the stream. */
export interface StreamFrame {
  type: 'message';
  event: PulledDelivery['event'];
  /** `<room>:<roomSeq>`. */
  id: string;
  cursor: string;
  room: string;
  roomSeq: number;
  message: PulledDelivery['message'];
  redelivered: boolean;
  backfilled: boolean;
  /** On the first frame of a room after messages lost to retention (see the SDK's `Delivery.gap`). */
  gap?: RetentionGap;
}

/** Where a stream writes: resolves once the frame was written to the socket. */
interface Sink {
  write(frame: StreamFrame): Promise<void>;
  readonly closed: boolean;
  onClose(fn: () => void): void;
  close(code: number, reason: string): void;
}

/** Runs one stream until the sink closes. */
async function run(
  service: GatewayService,
  principal: Principal,
  sink: Sink,
  resume: ClientCursor | undefined,
) {
  const me = principal.participant;
  const kv = service.kv();
  const key = `cursor.${me}`;
  const readAcked = async (): Promise<{ value: AckedCursor; revision: number }> => {
    const e = await kv.get(key);
    return e?.operation === 'PUT'
      ? { value: AckedCursor.parse(e.json()), revision: e.revision }
      : { value: { rooms: {} }, revision: 0 };
  };
  const positions: Record<string, number> = { ...(resume?.p ?? {}) };
  const acked = (await readAcked()).value;
  // Without a cursor the client starts from what the gateway acknowledged.
  if (!resume) for (const [room, r] of Object.entries(acked.rooms)) positions[room] = r.last;
  const frame = (d: Omit<StreamFrame, 'type' | 'id' | 'cursor'>): StreamFrame => {
    positions[d.room] = Math.max(positions[d.room] ?? 0, d.roomSeq);
    return {
      type: 'message',
      id: `${d.room}:${d.roomSeq}`,
      cursor: encodeCursor({ p: positions, t: Date.now() }),
      ...d,
    };
  };

  const held = await service.pool.acquire(me);
  const agent: Agent = held.agent;
  const stop = new AbortController();
  sink.onClose(() => stop.abort());
  try {
    // 1. What was acknowledged after the client's cursor: from the room log.
    if (resume) {
      for (const [room, r] of Object.entries(acked.rooms)) {
        const from = resume.p[room] ?? (r.at > resume.t ? r.first - 1 : r.last);
        if (r.last <= from) continue;
        const members = await agent.call(roomsApi.get, { room }).catch(() => undefined);
        const mine = members?.members.find((m) => m.id === me);
        let after = from;
        let gap: RetentionGap | undefined;
        for (;;) {
          let page: ApiResponse<typeof roomsApi.history>;
          try {
            page = await agent.call(roomsApi.history, {
              room,
              order: 'oldest',
              after,
              before: r.last + 1,
              limit: 200,
            });
          } catch (err) {
            // The cursor is older than the room log retains: go on from where it starts, and say so.
            const retainedFrom = Number((err as ParleyError).details?.retainedFrom);
            if (!isParleyError(err, 'HISTORY_EXPIRED') || gap || !(retainedFrom > after)) throw err;
            gap = { after: from, retainedFrom };
            after = retainedFrom - 1;
            continue;
          }
          for (const e of page.entries) {
            after = e.seq;
            const event = deliveryEventOf(e.message);
            if (event === 'message' && e.message.sender.id === me) continue;
            if (event === 'message' && mine?.delivery === 'mentions' && !e.message.mentions.includes(me))
              continue;
            if (sink.closed) return;
            await sink.write(
              frame({
                event,
                room,
                roomSeq: e.seq,
                message: e.message,
                redelivered: true,
                backfilled: true,
                ...(gap ? { gap } : {}),
              }),
            );
            gap = undefined;
          }
          if (!page.more) break;
        }
        positions[room] = Math.max(positions[room] ?? 0, r.last);
      }
    }
    // 2. Live, in inbox order; acknowledged after written.
    while (!sink.closed) {
      const batch = await agent.pull({ max: 100, signal: stop.signal });
      if (sink.closed) {
        batch.release();
        break;
      }
      const writes: Promise<void>[] = [];
      const done: Record<string, number> = {};
      for (const d of batch.deliveries) {
        if (d.roomSeq <= (positions[d.room] ?? 0)) continue; // already delivered (resumed or backfilled)
        done[d.room] = d.roomSeq;
        writes.push(
          sink.write(
            frame({
              event: d.event,
              room: d.room,
              roomSeq: d.roomSeq,
              message: d.message,
              redelivered: d.redelivered,
              backfilled: d.backfilled,
              ...(d.gap ? { gap: d.gap } : {}),
            }),
          ),
        );
      }
      try {
        await Promise.all(writes);
      } catch {
        batch.release();
        break;
      }
      if (Object.keys(done).length) await recordAcked(done);
      await batch.ack();
    }
  } finally {
    held.release();
  }

  async function recordAcked(done: Record<string, number>): Promise<void> {
    const now = Date.now();
    await updateKv<AckedCursor>(
      kv,
      key,
      (current) => {
        const value = current ?? { rooms: {} };
        for (const [room, seq] of Object.entries(done)) {
          const was = value.rooms[room];
          value.rooms[room] = {
            first: was?.first ?? seq,
            last: Math.max(was?.last ?? 0, seq),
            at: was?.at ?? now,
          };
        }
        return value;
      },
      { schema: AckedCursor, attempts: 10 },
    ).catch(() => {
      // Best effort: the acknowledged cursor only spares a reconnecting client a replay of what
      // it had; the batch itself is acknowledged either way.
    });
  }
}

function wsSink(socket: WebSocket): Sink {
  const closers: (() => void)[] = [];
  let closed = false;
  const onClose = () => {
    if (closed) return;
    closed = true;
    for (const fn of closers) fn();
  };
  socket.on('close', onClose);
  socket.on('error', onClose);
  const ping = setInterval(() => socket.ping(), 25_000);
  ping.unref();
  closers.push(() => clearInterval(ping));
  return {
    get closed() {
      return closed;
    },
    onClose: (fn) => closers.push(fn),
    close: (code, reason) => socket.close(code, reason),
    write: (f) =>
      new Promise((resolve, reject) => {
        if (closed) return reject(new Error('closed'));
        socket.send(JSON.stringify(f), (err) => (err ? reject(err) : resolve()));
      }),
  };
}

function sseSink(req: FastifyRequest, reply: FastifyReply): Sink {
  const res = reply.raw;
  const closers: (() => void)[] = [];
  let closed = false;
  const onClose = () => {
    if (closed) return;
    closed = true;
    for (const fn of closers) fn();
  };
  req.raw.on('close', onClose);
  res.on('error', onClose);
  const beat = setInterval(() => res.write(':\n\n'), 15_000);
  beat.unref();
  closers.push(() => clearInterval(beat));
  return {
    get closed() {
      return closed;
    },
    onClose: (fn) => closers.push(fn),
    close: () => res.end(),
    write: (f) =>
      new Promise((resolve, reject) => {
        if (closed) return reject(new Error('closed'));
        res.write(`id: ${f.cursor}\nevent: ${f.event}\ndata: ${JSON.stringify(f)}\n\n`, (err) =>
          err ? reject(err) : resolve(),
        );
      }),
  };
}

/** Registers `/v1/stream` (WebSocket) and `/v1/stream/sse`. */
export async function registerStream(app: FastifyInstance, service: GatewayService): Promise<void> {
  const log = service.log.child({ component: 'gateway-stream' });
  const active = new Map<string, Sink>();
  const lingering = new Map<string, NodeJS.Timeout>();
  const replaceActive = (me: string, sink: Sink) => {
    clearTimeout(lingering.get(me));
    lingering.delete(me);
    active.get(me)?.close(4000, 'replaced by a newer stream of the same principal');
    active.set(me, sink);
    sink.onClose(() => {
      if (active.get(me) === sink) active.delete(me);
    });
  };
  /**
   * A stream that ended leaves the principal's consumer running for a while: a client that
   * reconnects (to this replica) continues at once with what was released, in order. Only after
   * that does the connection stop consuming, so the deliveries it queued go back to the server for
   * a reconnect to another replica (which then waits for them at most two ack waits, as the SDK
   * does after a crash).
   */
  const retire = (participant: string) => {
    if (active.has(participant)) return;
    clearTimeout(lingering.get(participant));
    const timer = setTimeout(() => {
      lingering.delete(participant);
      if (!active.has(participant)) void service.pool.retire(participant);
    }, STREAM_LINGER_MS);
    timer.unref();
    lingering.set(participant, timer);
  };
  await app.register(async (stream) => {
    stream.addHook('onRequest', async (req) => {
      const principal = await authenticateRequest(service, req);
      requireScope(principal, 'read');
      req.principal = principal;
      const q = req.query as { cursor?: string };
      const token = q.cursor ?? (req.headers['last-event-id'] as string | undefined);
      if (token) (req as { resume?: ClientCursor }).resume = decodeCursor(token);
    });
    stream.get('/v1/stream', { websocket: true }, (socket, req) => {
      const principal = req.principal as Principal;
      const sink = wsSink(socket);
      replaceActive(principal.participant, sink);
      run(service, principal, sink, (req as { resume?: ClientCursor }).resume)
        .catch((err) => {
          log.warn({ err, participant: principal.participant }, 'stream ended with an error');
          if (!sink.closed) sink.close(1011, 'stream error: reconnect with the last cursor');
        })
        .finally(() => retire(principal.participant));
    });
    stream.get('/v1/stream/sse', async (req, reply) => {
      const principal = req.principal as Principal;
      reply.hijack();
      reply.raw.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-store',
        connection: 'keep-alive',
      });
      reply.raw.write(':ok\n\n');
      const sink = sseSink(req, reply);
      replaceActive(principal.participant, sink);
      await run(service, principal, sink, (req as { resume?: ClientCursor }).resume)
        .catch((err) => log.warn({ err, participant: principal.participant }, 'stream ended with an error'))
        .finally(() => retire(principal.participant));
      if (!sink.closed) reply.raw.end();
    });
  });
  app.addHook('preClose', async () => {
    for (const timer of lingering.values()) clearTimeout(timer);
    for (const sink of active.values()) sink.close(1001, 'server shutting down');
  });
}
