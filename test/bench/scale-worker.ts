/**
 * One of the processes holding `pnpm bench:scale`'s connected agents, so that no single Node
 * event loop is the limit. Driven over IPC by scale.ts:
 *
 * - `createRooms` — each room's first member connects, creates the room with the others, closes;
 * - `connect` — connects its share of agents through the SDK (presence on, as real agents run),
 *   each handling its inbox; answers with the connect and inbox-attach times;
 * - `sendIn` — the rooms (all of whose members are connected) it sends in, by their owners;
 * - `burst` / `rate` — the room owners it holds send room messages (as fast as a window allows, or
 *   at a fixed rate), stamped with the wall-clock send time;
 * - `stats` — deliveries handled so far and the send→handler latencies since the last `stats`;
 * - `close` — closes every agent.
 */
import { roomsApi } from '@parley/contracts';
import { type Agent, connect } from '@parley/sdk';
import { atRate, windowed } from './stats.js';

/** An agent this worker connects. */
export interface WorkerAgent {
  index: number;
  id: string;
  creds: string;
}

/** A room whose owner this worker holds and sends in. */
export interface WorkerRoom {
  id: string;
  owner: number;
}

/** What scale.ts asks. */
export type WorkerRequest =
  | { type: 'connect'; servers: string[]; agents: WorkerAgent[]; window: number }
  | { type: 'sendIn'; rooms: WorkerRoom[] }
  | { type: 'burst'; messages: number; window: number }
  | { type: 'rate'; perSec: number; seconds: number }
  | {
      type: 'createRooms';
      servers: string[];
      rooms: { r: number; owner: string; members: string[] }[];
      window: number;
    }
  | { type: 'stats' }
  | { type: 'close' };

/** What a worker answers (one answer per request, in order). */
export type WorkerReply =
  | {
      type: 'connected';
      connectMs: number[];
      listenMs: number[];
      failures: string[];
      connected: number[];
      retries: number;
    }
  | { type: 'ok' }
  | { type: 'sent'; sent: number; failures: string[] }
  | { type: 'stats'; delivered: number; latencies: number[]; rssMb: number }
  | { type: 'rooms'; created: { r: number; id: string; ms: number }[]; failures: string[]; retries: number }
  | { type: 'closed' };

/** Wall-clock milliseconds with a fraction: comparable across the processes of this machine. */
const now = () => performance.timeOrigin + performance.now();

const agents = new Map<number, Agent>();
/** Connects that had to be tried again (the server unreachable or slow: a loaded machine). */
let retries = 0;

/**
 * Runs `fn`, again after `retryAfterMs` when it fails with a retryable code (UNAVAILABLE,
 * DEADLINE_EXCEEDED, or those given), up to `attempts` times: what an agent that wants to be online does.
 */
async function retrying<T>(
  fn: () => Promise<T>,
  codes = ['UNAVAILABLE', 'DEADLINE_EXCEEDED'],
  attempts = 5,
): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await fn();
    } catch (err) {
      const e = err as { code?: string; retryAfterMs?: number };
      if (i >= attempts || !codes.includes(e.code ?? '')) throw err;
      retries++;
      await new Promise((r) => setTimeout(r, e.retryAfterMs ?? 1000));
    }
  }
}
let rooms: WorkerRoom[] = [];
let delivered = 0;
let latencies: number[] = [];
const payload = 'x'.repeat(256);

function reply(m: WorkerReply): void {
  process.send?.(m);
}

async function sendOne(i: number, failures: string[]): Promise<void> {
  const r = rooms[i % rooms.length];
  const agent = r && agents.get(r.owner);
  if (!r || !agent) return;
  try {
    await agent.rooms.room(r.id).send(payload, { metadata: { t: String(now()) } });
  } catch (err) {
    if (failures.length < 20) failures.push(`${r.id}: ${(err as Error).message}`);
  }
}

async function handle(m: WorkerRequest): Promise<void> {
  switch (m.type) {
    case 'connect': {
      const connectMs: number[] = [];
      const listenMs: number[] = [];
      const failures: string[] = [];
      await windowed(m.agents.length, m.window, async (i) => {
        const a = m.agents[i];
        if (!a) return;
        try {
          const t0 = now();
          const agent = await retrying(() =>
            connect({
              servers: m.servers,
              creds: a.creds,
              delivery: { includeOwn: true },
            }),
          );
          const t1 = now();
          agent.on('message', (d) => {
            delivered++;
            const t = Number(d.message.metadata?.t);
            if (t) latencies.push(now() - t);
          });
          await agent.listening;
          connectMs.push(t1 - t0);
          listenMs.push(now() - t1);
          agents.set(a.index, agent);
        } catch (err) {
          if (failures.length < 20) failures.push(`${a.id}: ${(err as Error).message}`);
        }
      });
      const tried = retries;
      retries = 0;
      return reply({
        type: 'connected',
        connectMs,
        listenMs,
        failures,
        connected: [...agents.keys()],
        retries: tried,
      });
    }
    case 'sendIn': {
      rooms = m.rooms;
      return reply({ type: 'ok' });
    }
    case 'burst': {
      const failures: string[] = [];
      await windowed(m.messages, m.window, (i) => sendOne(i, failures));
      return reply({ type: 'sent', sent: m.messages, failures });
    }
    case 'rate': {
      const failures: string[] = [];
      const n = Math.round(m.perSec * m.seconds);
      const pending: Promise<void>[] = [];
      await atRate(n, m.perSec, (i) => void pending.push(sendOne(i, failures)));
      await Promise.all(pending);
      return reply({ type: 'sent', sent: n, failures });
    }
    case 'createRooms': {
      const created: { r: number; id: string; ms: number }[] = [];
      const failures: string[] = [];
      await windowed(m.rooms.length, m.window, async (i) => {
        const room = m.rooms[i];
        if (!room) return;
        try {
          // The room's first member creates it, as an agent would; it does not listen here.
          const owner = await retrying(() =>
            connect({ servers: m.servers, creds: room.owner, presence: false }),
          );
          try {
            const t = now();
            // rooms.create is one call (what the SDK's rooms.create sends), given time on a busy
            // machine: it is many sequential JetStream writes (see docs/operations.md "Capacity").
            // The rooms service answers UNAVAILABLE when no room was made (a check or a write
            // before the room record got no answer): asked again. DEADLINE_EXCEEDED may have made
            // one, so it is not. Ten tries: at 10,000 registered agents nats-server's JetStream API
            // stopped answering for ~30 s once (five tries were not enough; see docs/operations.md).
            const made = await retrying(
              () =>
                owner.call(
                  roomsApi.create,
                  { title: `scale ${room.r}`, members: room.members, direct: false },
                  { timeout: 60_000 },
                ),
              ['UNAVAILABLE'],
              10,
            );
            created.push({ r: room.r, id: made.id, ms: now() - t });
          } finally {
            await owner.close();
          }
        } catch (err) {
          if (failures.length < 20)
            failures.push(
              `room ${room.r}: ${(err as { code?: string }).code ?? ''} ${(err as Error).message}`,
            );
        }
      });
      const tried = retries;
      retries = 0;
      return reply({ type: 'rooms', created, failures, retries: tried });
    }
    case 'stats': {
      const out = latencies;
      latencies = [];
      return reply({
        type: 'stats',
        delivered,
        latencies: out,
        rssMb: Math.round(process.memoryUsage.rss() / 1024 / 1024),
      });
    }
    case 'close': {
      await Promise.allSettled([...agents.values()].map((a) => a.close()));
      agents.clear();
      rooms = [];
      return reply({ type: 'closed' });
    }
  }
}

// Requests are handled one after another: each answer follows its request.
let queue = Promise.resolve();
process.on('message', (m: WorkerRequest) => {
  queue = queue
    .then(() => handle(m))
    .catch((err) => {
      process.stderr.write(`scale worker: ${(err as Error).stack}\n`);
      process.exit(1);
    });
});
process.on('disconnect', () => process.exit(0));
