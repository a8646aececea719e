/**
 * The soak: steady traffic at a fraction of Parley's measured capacity on the standalone backbone
 * (services/standalone, its own process with its own nats-server), for minutes to an hour, while
 * agents connect and disconnect and rooms are created and closed through the SDK. It samples the
 * resident memory of every process and the send→handler latency of every delivery, and checks that
 * every accepted message reached every member once, in room order.
 *
 * Shape: a pool of registered agents; `rooms` rooms are open at any time, each with
 * `membersPerRoom` agents of its own. A room lives `roomLifeSeconds` (spread ±50%), then stops
 * taking sends, waits until every member handled every accepted message, is closed by its owner
 * (`rooms.close`), and its members disconnect; a new room takes idle agents from the pool, which
 * connect afresh (new connection, inbox attached again). So agents connect and disconnect, and
 * rooms open and close, all the time, at a rate that does not depend on the traffic rate.
 *
 * The agents run in this process (their RSS is this process's); the backbone runs in its own.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { chmod, cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { isParleyError, registryApi } from '@parley/contracts';
import { findNatsServer } from '@parley/nats-server';
import { type Agent, connect, type Delivery } from '@parley/sdk';
import { setupParley } from '../bench/parley.js';
import { atRate, childPids, cpuSeconds, median, tail } from '../bench/stats.js';
import { type BackboneProcess, freePort, startBackboneProcess, waitFor } from '../harness/index.js';

/** What a soak run does; every field has a default. */
export interface SoakOptions {
  /** Whole run, warm-up included. @default 60 */
  minutes?: number;
  /** Room messages per second; when unset, `capacityFraction` of the capacity the probe measures. */
  rate?: number;
  /** @default 0.5 */
  capacityFraction?: number;
  /** Warm-up: growth and lateness are judged after it. @default min(10 min, max(30 s, run / 6)) */
  warmupSeconds?: number;
  /** Memory sample interval. @default 5 (2 when the run is under 10 min) */
  sampleSeconds?: number;
  /** One row of the table per interval. @default 60 (15 when the run is under 10 min) */
  intervalSeconds?: number;
  /** Rooms open at once. @default 12 */
  rooms?: number;
  /** @default 3 */
  membersPerRoom?: number;
  /** Spare agents beyond the open rooms' members (idle, disconnected). @default 12 */
  spareAgents?: number;
  /** Mean life of a room. @default 20 */
  roomLifeSeconds?: number;
  /** @default 512 */
  payloadBytes?: number;
  /** A delivery later than this is late (counted per interval). @default 1000 */
  lateMs?: number;
  /** A delivery after warm-up later than this fails the run. @default `lateMs` */
  failLateMs?: number;
  /** A process whose memory grows more than this (fraction) after warm-up fails the run. @default 0.1 */
  maxGrowth?: number;
  /** Per process, instead of `maxGrowth`. */
  growthLimits?: Partial<Record<ProcessName, number>>;
  /**
   * Judge memory growth. Off in the short form, whose minute of traffic cannot hold a warm-up (the
   * growth is still measured and printed). @default true
   */
  checkGrowth?: boolean;
  /**
   * How often nats-server's memory is measured settled (a forced GC through its profiling port, then
   * its RSS without the freed heap the Go runtime keeps). @default 30 (5 when the run is under 10 min)
   */
  settleSeconds?: number;
  /** Progress lines (stderr in the CLI). */
  log?: (line: string) => void;
}

/** Resident memory of each process, MB, at one instant. */
export interface MemorySample {
  /** Seconds since the traffic started. */
  at: number;
  rssMb: Record<ProcessName, number>;
  /**
   * V8 heap in use, MB, of the two Node processes (the services' from their /metrics): when RSS
   * grows and this does not, the growth is outside the JS heap (buffers, allocator).
   */
  heapUsedMb: { services?: number; agents: number };
}

/**
 * nats-server's memory after a forced garbage collection (`/debug/pprof/heap?gc=1` on its profiling
 * port), MB. Its RSS alone grows with heap the Go runtime freed but keeps mapped (HeapIdle −
 * HeapReleased: 14 → 30 MB in a profiled 14-minute run whose live heap was flat), so RSS growth is
 * not live growth.
 */
export interface SettledSample {
  /** Seconds since the traffic started. */
  at: number;
  rssMb: number;
  /** RSS minus the freed heap the runtime keeps (HeapIdle − HeapReleased): what the growth check judges. */
  settledMb: number;
  /** Live Go heap after the collection (HeapAlloc). */
  heapAllocMb: number;
  /** Freed heap kept mapped (HeapIdle − HeapReleased). */
  idleKeptMb: number;
}

/** The names of the sampled processes. */
export type ProcessName = 'natsServer' | 'services' | 'agents';
const PROCESSES: ProcessName[] = ['natsServer', 'services', 'agents'];

/** One row of the table: what happened in one interval. */
export interface SoakInterval {
  /** End of the interval, seconds since the traffic started. */
  at: number;
  warmup: boolean;
  sentPerSec: number;
  deliveriesPerSec: number;
  latencyMs: { p50: number; p99: number; max: number; count: number };
  /**
   * p99 of the two halves of a delivery's latency: send → stored in the member's inbox (ingress,
   * room log, fan-out) and inbox → handler (the inbox consumer, the SDK); clocks of one machine.
   */
  stageP99Ms: { toInbox: number; toHandler: number };
  late: number;
  refused: number;
  roomsCreated: number;
  roomsClosed: number;
  connects: number;
  disconnects: number;
  /** Connects, room creates and closes that failed and were tried again. */
  connectErrors: number;
  /** Median RSS of the interval's samples, MB. */
  rssMb: Record<ProcessName, number>;
  /** CPU used in the interval, % of one core. */
  cpuPct: Record<ProcessName, number>;
  /**
   * Time the process's threads waited for a CPU while runnable, % of the interval (summed over
   * threads, so it can pass 100): high when the machine is oversubscribed, whatever Parley does.
   */
  runQueuePct: Record<ProcessName, number>;
  /**
   * Of the time the three processes were runnable, the share they waited for a CPU (run-queue wait
   * / (wait + CPU), summed over the processes), %: the machine's part of any delay in the interval.
   */
  waitSharePct: number;
  /** Median of nats-server's settled memory samples of the interval (see {@link SettledSample}), MB. */
  natsSettledMb: number;
  /** 1-minute load average of the machine at the end of the interval. */
  load: number;
}

/** How a process's memory moved after warm-up. */
export interface Growth {
  /** What was compared: RSS, or (nats-server) its settled memory (see {@link SettledSample}). */
  measure: 'rss' | 'settled';
  /** Median RSS of the first post-warm-up window, MB. */
  firstMb: number;
  /** Median RSS of the last window, MB. */
  lastMb: number;
  /** (last - first) / first. */
  growth: number;
}

/** The whole run: the figures, the time series and why it failed (empty when it passed). */
export interface SoakResult {
  /** How the rate was set. */
  capacity: { deliveriesPerSec?: number; fraction?: number; source: 'probe' | '--rate' };
  rate: number;
  membersPerRoom: number;
  minutes: number;
  warmupSeconds: number;
  windowSeconds: number;
  intervals: SoakInterval[];
  samples: MemorySample[];
  /** nats-server's settled memory over time (empty when its profiling port did not answer). */
  settled: SettledSample[];
  growth: Record<ProcessName, Growth>;
  /** nats-server's plain RSS over the same windows, for comparison with its settled growth. */
  natsRssGrowth: Growth;
  /** Whether growth failed the run (off in the short form). */
  growthChecked: boolean;
  totals: {
    accepted: number;
    refused: Record<string, number>;
    deliveries: number;
    late: number;
    /**
     * Where the lateness after warm-up came from: late deliveries in intervals where Parley's
     * processes waited for a CPU at least as long as they ran (waitSharePct ≥ 50: the machine was
     * oversubscribed), and the estimated share of all late deliveries' time that was run-queue wait
     * (each late delivery's latency × its interval's wait share, summed, over their summed latency).
     */
    lateWhileStarved: number;
    lateMachineSharePct: number;
    roomsCreated: number;
    roomsClosed: number;
    connects: number;
    disconnects: number;
    /** Failed connects, room creates and closes (tried again), by call and code. */
    connectErrors: Record<string, number>;
    latencyMs: { p50: number; p99: number; max: number };
  };
  lateExamples: string[];
  failures: string[];
}

interface OpenRoom {
  id: string;
  members: Agent[];
  /** Room seqs of accepted sends. */
  accepted: number[];
  /** Room seqs each member handled, in handling order. */
  handled: Map<string, number[]>;
  inFlight: number;
  closing: boolean;
}

/** Resident memory of a process in MB (VmRSS), or 0 when it is gone. */
function rssMb(pid: number): number {
  try {
    const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
    return m ? Math.round(Number(m[1]) / 102.4) / 10 : 0;
  } catch {
    return 0;
  }
}

/**
 * Seconds the threads of a process have waited on a run queue, runnable but not running (Linux
 * schedstat): what CPU starvation by other processes on the machine costs it.
 */
function runQueueSeconds(pid: number): number {
  let ns = 0;
  try {
    for (const t of readdirSync(`/proc/${pid}/task`)) {
      try {
        ns += Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[1] ?? 0);
      } catch {}
    }
  } catch {}
  return ns / 1e9;
}

const round = (n: number, d = 1) => Math.round(n * 10 ** d) / 10 ** d;

/** Runs the soak; resolves with its figures (`failures` empty when it passed). */
export async function runSoak(options: SoakOptions = {}): Promise<SoakResult> {
  const minutes = options.minutes ?? 60;
  const short = minutes < 10;
  const totalSec = minutes * 60;
  const warmupSeconds = options.warmupSeconds ?? Math.min(600, Math.max(30, Math.round(totalSec / 6)));
  const sampleSeconds = options.sampleSeconds ?? (short ? 2 : 5);
  const intervalSeconds = options.intervalSeconds ?? (short ? 15 : 60);
  const roomCount = options.rooms ?? 12;
  const membersPerRoom = options.membersPerRoom ?? 3;
  const poolSize = roomCount * membersPerRoom + (options.spareAgents ?? 12);
  const roomLifeMs = (options.roomLifeSeconds ?? 20) * 1000;
  const lateMs = options.lateMs ?? 1000;
  const failLateMs = options.failLateMs ?? lateMs;
  const limitOf = (p: ProcessName) => options.growthLimits?.[p] ?? options.maxGrowth ?? 0.1;
  const checkGrowth = options.checkGrowth ?? true;
  const settleSeconds = options.settleSeconds ?? (short ? 5 : 30);
  const log = options.log ?? (() => undefined);
  // The post-warm-up windows whose medians are compared: a quarter of what is left, at most 10 min.
  const windowSeconds = Math.min(
    600,
    Math.max(sampleSeconds * 3, Math.round((totalSec - warmupSeconds) / 4)),
  );
  if (warmupSeconds + 2 * windowSeconds > totalSec)
    throw new Error(`a ${minutes}-minute run is too short for a ${warmupSeconds} s warm-up and two windows`);

  const home = await mkdtemp(join(tmpdir(), 'parley-soak-'));
  const httpPort = await freePort();
  // nats-server with its profiling port open (a flag the standalone has no setting for): the
  // settled-memory samples force a collection through it and read the Go runtime's figures.
  const natsBin = await findNatsServer();
  if (!natsBin) throw new Error('nats-server not found (PATH or NATS_SERVER_BIN)');
  const profPort = await freePort();
  const wrapper = join(home, 'nats-server-profiled');
  await writeFile(wrapper, `#!/bin/sh\nexec ${JSON.stringify(natsBin)} --profile ${profPort} "$@"\n`);
  await chmod(wrapper, 0o755);
  const backbone: BackboneProcess = startBackboneProcess(
    [
      '--no-demo',
      '--home',
      home,
      '--nats-port',
      String(await freePort()),
      '--http-port',
      String(httpPort),
      '--nats-ws-port',
      String(await freePort()),
    ],
    {
      LOG_LEVEL: 'warn',
      // Agents sending without a human in the room would trip the traffic guards (rate limits,
      // runaway detector); they stay in the path, idle, as in `pnpm bench`.
      PARLEY_RATE_AGENT_PER_SEC: '0',
      PARLEY_RATE_ROOM_PER_SEC: '0',
      PARLEY_RUNAWAY_MESSAGES: '0',
      NATS_SERVER_BIN: wrapper,
    },
  );
  const agents: Agent[] = [];
  let admin: Agent | undefined;
  const failures: string[] = [];
  try {
    await backbone.waitForOutput('Parley is running');
    const run = JSON.parse(readFileSync(join(home, 'run.json'), 'utf8')) as { natsUrl: string };
    const natsUrl = run.natsUrl;
    const metricsUrl = `http://127.0.0.1:${httpPort}/metrics`;
    const adminCreds = join(home, 'creds', 'admin.creds');
    const natsPid = childPids(backbone.pid)[0];
    if (!natsPid) throw new Error('the backbone has no nats-server child process');
    const pids: Record<ProcessName, number> = {
      natsServer: natsPid,
      services: backbone.pid,
      agents: process.pid,
    };

    // Capacity: the bench's own measurement (test/bench/parley.ts), small, on this backbone.
    let capacity: SoakResult['capacity'];
    let rate: number;
    if (options.rate) {
      rate = options.rate;
      capacity = { source: '--rate' };
    } else {
      log('probing capacity (bench shape: 10 rooms × 3 members, 512 B, window 64; median of 3)');
      const probe = await setupParley({
        natsUrl,
        adminCreds,
        rooms: 10,
        membersPerRoom: 3,
        payloadBytes: 512,
        window: 64,
      });
      try {
        await probe.throughput(300); // warms the path
        // The median of three runs, as `pnpm bench` does: one run on a shared machine can be off 3×.
        const runs: number[] = [];
        for (let i = 0; i < 3; i++) runs.push(await probe.throughput(short ? 1000 : 2000));
        const perSec = median(runs);
        const fraction = options.capacityFraction ?? 0.5;
        capacity = { deliveriesPerSec: perSec, fraction, source: 'probe' };
        rate = Math.max(1, Math.round((perSec * fraction) / membersPerRoom));
      } finally {
        await probe.close();
      }
    }
    log(`rate: ${rate} room messages/s (${rate * membersPerRoom} deliveries/s)`);

    admin = await connect({ servers: natsUrl, creds: adminCreds, presence: false });
    log(`registering ${poolSize} agents`);
    const creds: { id: string; creds: string }[] = [];
    // A few at a time: one after the other took seconds of the short form.
    for (let i = 0; i < poolSize; i += 8) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(8, poolSize - i) }, (_, k) =>
          admin?.call(registryApi.createAgent, { card: { name: `soak-${i + k}` } }),
        ),
      );
      for (const c of batch) if (c) creds.push({ id: c.agent.id, creds: c.credentials.creds });
    }
    const idle = [...creds];

    const open = new Map<string, OpenRoom>();
    const lateExamples: string[] = [];
    const refused: Record<string, number> = {};
    let stopping = false;
    const t0 = performance.now();
    const elapsed = () => (performance.now() - t0) / 1000;

    // Per-interval counters, reset at each row.
    const zero = () => ({
      sent: 0,
      deliveries: 0,
      late: 0,
      refused: 0,
      created: 0,
      closed: 0,
      connects: 0,
      disconnects: 0,
      connectErrors: 0,
      lateAfter: 0,
      lateAfterMs: 0,
    });
    let cur = zero();
    let latencies: number[] = [];
    const totals = {
      accepted: 0,
      deliveries: 0,
      late: 0,
      failLate: 0,
      lateWhileStarved: 0,
      lateMs: 0,
      lateMachineMs: 0,
      created: 0,
      closed: 0,
      connects: 0,
      disconnects: 0,
    };
    // Whole-run latency: a uniform sample of fixed size (reservoir), so the run's own bookkeeping
    // does not grow the agents' process it measures.
    const RESERVOIR = 20_000;
    const allLatencies: number[] = [];
    let stageInbox: number[] = [];
    let stageHandler: number[] = [];

    const onMessage = (self: string) => (d: Delivery) => {
      const t = d.message.metadata?.t;
      if (!t) return;
      const ms = performance.now() - Number(t);
      const r = open.get(d.room);
      if (!r) {
        if (failures.length < 1000)
          failures.push(`${self} handled ${d.room} #${d.roomSeq} after its room was checked and closed`);
        return;
      }
      r.handled.get(self)?.push(d.roomSeq);
      cur.deliveries++;
      totals.deliveries++;
      latencies.push(ms);
      if (allLatencies.length < RESERVOIR) allLatencies.push(ms);
      else {
        const j = Math.floor(Math.random() * totals.deliveries);
        if (j < RESERVOIR) allLatencies[j] = ms;
      }
      const w = Number(d.message.metadata?.w);
      if (w && d.inboxedAt) {
        stageInbox.push(d.inboxedAt - w);
        stageHandler.push(Date.now() - d.inboxedAt);
      }
      if (ms > lateMs) {
        cur.late++;
        const after = elapsed() > warmupSeconds;
        if (after) {
          totals.late++;
          cur.lateAfter++;
          cur.lateAfterMs += ms;
        }
        if (after && ms > failLateMs) totals.failLate++;
        if (after ? lateExamples.length < 20 : lateExamples.length < 5)
          lateExamples.push(
            `${Math.round(ms)} ms at ${Math.round(elapsed())} s: ${d.room} #${d.roomSeq} to ${self} (redelivered ${d.redelivered}, backfilled ${d.backfilled})`,
          );
      }
    };

    const connectAgent = async (c: { id: string; creds: string }) => {
      const a = await connect({ servers: natsUrl, creds: c.creds, delivery: { includeOwn: true } });
      a.on('message', onMessage(c.id));
      await a.listening;
      agents.push(a);
      cur.connects++;
      totals.connects++;
      return a;
    };

    const connectErrors: Record<string, number> = {};
    // A connect, create or close that fails for a passing reason (the server's authentication
    // timeout, DEADLINE_EXCEEDED, UNAVAILABLE on a loaded machine) is tried again, as an agent's
    // supervisor would; each failure is counted by call and code, and only the fifth fails the run.
    const retried = async <T>(what: string, call: () => Promise<T>): Promise<T> => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await call();
        } catch (err) {
          const code = isParleyError(err) ? err.code : (err as Error).name;
          const key = `${what}: ${code}`;
          connectErrors[key] = (connectErrors[key] ?? 0) + 1;
          cur.connectErrors++;
          if (attempt >= 5) throw err;
          await new Promise((r) => setTimeout(r, 500 * attempt));
        }
      }
    };
    const openRoom = async () => {
      const picked = idle.splice(0, membersPerRoom);
      if (picked.length < membersPerRoom) throw new Error('the agent pool ran dry');
      const members: Agent[] = [];
      for (const c of picked) members.push(await retried('connect', () => connectAgent(c)));
      const [owner, ...rest] = members as [Agent, ...Agent[]];
      // A create retried after a timeout may leave the first room behind, empty of traffic.
      const room = await retried('rooms.create', () =>
        owner.rooms.create(`soak ${totals.created}`, { members: rest.map((m) => m.id) }),
      );
      const r: OpenRoom = {
        id: room.id,
        members,
        accepted: [],
        handled: new Map(members.map((m) => [m.id, []])),
        inFlight: 0,
        closing: false,
      };
      open.set(room.id, r);
      cur.created++;
      totals.created++;
      return r;
    };

    const closeRoom = async (r: OpenRoom) => {
      r.closing = true;
      await waitFor(() => r.inFlight === 0, `the sends to ${r.id} to settle`, 60_000);
      const want = [...r.accepted].sort((a, b) => a - b);
      try {
        await waitFor(
          () => [...r.handled.values()].every((h) => h.length >= want.length),
          () =>
            `every member of ${r.id} to handle its ${want.length} accepted messages (handled: ${[...r.handled.values()].map((h) => h.length).join(', ')})`,
          30_000,
        );
      } catch (err) {
        failures.push(`lost: ${(err as Error).message}`);
      }
      for (const [member, got] of r.handled) {
        if (got.length !== want.length || got.some((s, i) => s !== want[i])) {
          const dup = got.length - new Set(got).size;
          failures.push(
            `${member} in ${r.id}: handled ${got.length} of ${want.length} accepted (${dup} duplicates, ${got.some((s, i) => i > 0 && s < (got[i - 1] ?? 0)) ? 'out of order' : 'in order'})`,
          );
        }
      }
      const owner = r.members[0];
      // Closing a closed room answers the room: a retry is safe.
      if (owner) await retried('rooms.close', () => owner.rooms.room(r.id).close());
      open.delete(r.id);
      cur.closed++;
      totals.closed++;
      await Promise.all(
        r.members.map(async (m) => {
          await m.close();
          agents.splice(agents.indexOf(m), 1);
          cur.disconnects++;
          totals.disconnects++;
        }),
      );
      idle.push(
        ...r.members.map((m) => ({ id: m.id, creds: creds.find((c) => c.id === m.id)?.creds ?? '' })),
      );
    };

    // Each room slot: open, live, drain, close, again — until the run ends.
    const slot = async (k: number) => {
      // Staggered, so rooms do not all close at once.
      let life = roomLifeMs * ((k + 1) / roomCount);
      while (!stopping) {
        const r = await openRoom().catch((err: unknown) => {
          failures.push(`a room could not be opened: ${(err as Error).message}`);
          return undefined;
        });
        if (!r) break;
        const until = performance.now() + life;
        await waitFor(() => stopping || performance.now() >= until, 'the room’s life', life + 60_000);
        await closeRoom(r);
        life = roomLifeMs * (0.5 + Math.random());
      }
    };

    const payload = 'x'.repeat(options.payloadBytes ?? 512);
    let next = 0;
    const send = () => {
      const live = [...open.values()].filter((r) => !r.closing);
      const r = live[next++ % Math.max(1, live.length)];
      if (!r) return;
      const sender = r.members[next % r.members.length];
      if (!sender) return;
      r.inFlight++;
      cur.sent++;
      sender.rooms
        .room(r.id)
        .send(payload, { metadata: { t: String(performance.now()), w: String(Date.now()) } })
        .then(
          (reply) => {
            r.accepted.push(reply.roomSeq);
            totals.accepted++;
          },
          (err: unknown) => {
            const code = isParleyError(err) ? err.code : (err as Error).name;
            refused[code] = (refused[code] ?? 0) + 1;
            cur.refused++;
          },
        )
        .finally(() => r.inFlight--);
    };

    const samples: MemorySample[] = [];
    const intervals: SoakInterval[] = [];
    let intervalSamples: MemorySample[] = [];
    const servicesHeap = async () => {
      try {
        const text = await (await fetch(metricsUrl, { signal: AbortSignal.timeout(2000) })).text();
        const m = text.match(/^nodejs_heap_size_used_bytes(?:\{[^}]*\})? ([\d.e+]+)/m);
        return m ? round(Number(m[1]) / 2 ** 20) : undefined;
      } catch {
        return undefined;
      }
    };
    const gone = new Set<ProcessName>();
    const sample = () => {
      const rss = Object.fromEntries(PROCESSES.map((p) => [p, rssMb(pids[p])])) as Record<
        ProcessName,
        number
      >;
      for (const p of PROCESSES) {
        // A process that exited is a failure in itself, not a -100% growth.
        if (rss[p] === 0 && !gone.has(p)) {
          gone.add(p);
          failures.push(`${p} (pid ${pids[p]}) exited at ${round(elapsed())} s of the run`);
        }
      }
      const s: MemorySample = {
        at: round(elapsed()),
        rssMb: rss,
        heapUsedMb: { agents: round(process.memoryUsage().heapUsed / 2 ** 20) },
      };
      void servicesHeap().then((mb) => {
        if (mb !== undefined) s.heapUsedMb.services = mb;
      });
      samples.push(s);
      intervalSamples.push(s);
    };
    const settled: SettledSample[] = [];
    let intervalSettled: SettledSample[] = [];
    let settling = false;
    const profileUrl = `http://127.0.0.1:${profPort}/debug/pprof/heap?debug=1&gc=1`;
    const settle = async () => {
      if (settling) return;
      settling = true;
      try {
        const text = await (await fetch(profileUrl, { signal: AbortSignal.timeout(10_000) })).text();
        const stat = (name: string) => Number(text.match(new RegExp(`^# ${name} = (\\d+)`, 'm'))?.[1]);
        const idleKept = (stat('HeapIdle') - stat('HeapReleased')) / 2 ** 20;
        const rss = rssMb(pids.natsServer);
        if (!Number.isFinite(idleKept) || rss === 0) return;
        const x: SettledSample = {
          at: round(elapsed()),
          rssMb: rss,
          settledMb: round(rss - idleKept),
          heapAllocMb: round(stat('HeapAlloc') / 2 ** 20),
          idleKeptMb: round(idleKept),
        };
        settled.push(x);
        intervalSettled.push(x);
      } catch {
        // No answer in time (a loaded machine): this sample is missing, the next one will come.
      } finally {
        settling = false;
      }
    };
    let lastRow = 0;
    const cpuOf = () => Object.fromEntries(PROCESSES.map((p) => [p, cpuSeconds(pids[p]) ?? 0]));
    const waitOf = () => Object.fromEntries(PROCESSES.map((p) => [p, runQueueSeconds(pids[p])]));
    let lastCpu = cpuOf();
    let lastWait = waitOf();
    const row = () => {
      const now = elapsed();
      const cpu = cpuOf();
      const wait = waitOf();
      const span = Math.max(0.001, now - lastRow);
      const lat = tail(latencies);
      let waitSum = 0;
      let cpuSum = 0;
      for (const p of PROCESSES) {
        waitSum += (wait[p] ?? 0) - (lastWait[p] ?? 0);
        cpuSum += (cpu[p] ?? 0) - (lastCpu[p] ?? 0);
      }
      const waitShare = waitSum + cpuSum > 0 ? waitSum / (waitSum + cpuSum) : 0;
      if (waitShare >= 0.5) totals.lateWhileStarved += cur.lateAfter;
      totals.lateMs += cur.lateAfterMs;
      totals.lateMachineMs += cur.lateAfterMs * waitShare;
      const iv: SoakInterval = {
        at: Math.round(now),
        warmup: now <= warmupSeconds,
        sentPerSec: round(cur.sent / span),
        deliveriesPerSec: round(cur.deliveries / span),
        latencyMs: { p50: lat.p50, p99: lat.p99, max: lat.max, count: lat.count },
        stageP99Ms: { toInbox: tail(stageInbox).p99, toHandler: tail(stageHandler).p99 },
        late: cur.late,
        refused: cur.refused,
        roomsCreated: cur.created,
        roomsClosed: cur.closed,
        connects: cur.connects,
        disconnects: cur.disconnects,
        connectErrors: cur.connectErrors,
        rssMb: Object.fromEntries(
          PROCESSES.map((p) => [p, median(intervalSamples.map((s) => s.rssMb[p]))]),
        ) as Record<ProcessName, number>,
        cpuPct: Object.fromEntries(
          PROCESSES.map((p) => [p, Math.round((((cpu[p] ?? 0) - (lastCpu[p] ?? 0)) / span) * 100)]),
        ) as Record<ProcessName, number>,
        runQueuePct: Object.fromEntries(
          PROCESSES.map((p) => [p, Math.round((((wait[p] ?? 0) - (lastWait[p] ?? 0)) / span) * 100)]),
        ) as Record<ProcessName, number>,
        waitSharePct: Math.round(waitShare * 100),
        natsSettledMb: median(intervalSettled.map((x) => x.settledMb)),
        load: round(loadavg()[0] ?? 0, 2),
      };
      lastCpu = cpu;
      lastWait = wait;
      intervals.push(iv);
      log(formatRow(iv));
      lastRow = now;
      latencies = [];
      stageInbox = [];
      stageHandler = [];
      intervalSamples = [];
      intervalSettled = [];
      cur = zero();
    };

    log(
      `soak: ${round(minutes, 2)} min, warm-up ${warmupSeconds} s, ${roomCount} rooms × ${membersPerRoom} open`,
    );
    log(HEADER);
    const slots = Array.from({ length: roomCount }, (_, k) =>
      slot(k).catch((err: unknown) => {
        failures.push(`a room slot failed: ${(err as Error).message}`);
      }),
    );
    const sampler = setInterval(sample, sampleSeconds * 1000);
    const settler = setInterval(() => void settle(), settleSeconds * 1000);
    const rower = setInterval(row, intervalSeconds * 1000);
    sample();
    try {
      await atRate(Math.round(rate * totalSec), rate, send);
    } finally {
      stopping = true;
    }
    // The growth windows end here: the drain after it is not steady traffic.
    const trafficEnd = elapsed();
    // Every slot drains and checks its last room; what they deliver counts in the last row.
    await Promise.all(slots);
    clearInterval(sampler);
    clearInterval(settler);
    clearInterval(rower);
    sample();
    row();

    // Memory growth after warm-up: the median of the first post-warm-up window against the median
    // of the last window. A JS process's RSS saw-tooths with garbage collection, and nats-server's
    // with its block caches: one sample against one sample compares a peak with a trough.
    const windowed = <T extends { at: number }>(list: T[], value: (x: T) => number): Growth => {
      const first = median(
        list.filter((x) => x.at > warmupSeconds && x.at <= warmupSeconds + windowSeconds).map(value),
      );
      const last = median(
        list.filter((x) => x.at > trafficEnd - windowSeconds && x.at <= trafficEnd).map(value),
      );
      return { measure: 'rss', firstMb: first, lastMb: last, growth: round((last - first) / first, 3) };
    };
    const natsRssGrowth = windowed(samples, (x) => x.rssMb.natsServer);
    const natsSettled = windowed(settled, (x) => x.settledMb);
    const growth = Object.fromEntries(
      PROCESSES.map((p) => [p, windowed(samples, (x) => x.rssMb[p])]),
    ) as Record<ProcessName, Growth>;
    // nats-server is judged on its settled memory when both windows have samples of it.
    if (Number.isFinite(natsSettled.growth)) growth.natsServer = { ...natsSettled, measure: 'settled' };
    else if (checkGrowth) log('nats-server: no settled samples in a growth window; its RSS is judged');
    for (const p of PROCESSES) {
      const g = growth[p];
      if (checkGrowth && !(g.growth <= limitOf(p)))
        failures.push(
          `${p} grew ${round(g.growth * 100)}% after warm-up (${g.measure === 'settled' ? 'settled memory' : 'RSS'}, median ${g.firstMb} → ${g.lastMb} MB; limit ${limitOf(p) * 100}%)`,
        );
    }
    const lateMachineSharePct =
      totals.lateMs > 0 ? Math.round((totals.lateMachineMs / totals.lateMs) * 100) : 0;
    if (totals.failLate > 0)
      failures.push(
        `${totals.failLate} deliveries after warm-up were later than ${failLateMs} ms (${totals.lateWhileStarved} of the ${totals.late} later than ${lateMs} ms came in intervals where Parley's processes waited for a CPU as long as they ran; ≈${lateMachineSharePct}% of the late deliveries' time was run-queue wait; late ones: ${lateExamples.slice(-3).join('; ')})`,
      );
    if (totals.accepted === 0) failures.push('no message was accepted');
    const all = tail(allLatencies);
    return {
      capacity,
      rate,
      membersPerRoom,
      minutes,
      warmupSeconds,
      windowSeconds,
      intervals,
      samples,
      settled,
      growth,
      natsRssGrowth,
      growthChecked: checkGrowth,
      totals: {
        accepted: totals.accepted,
        refused,
        deliveries: totals.deliveries,
        late: totals.late,
        lateWhileStarved: totals.lateWhileStarved,
        lateMachineSharePct,
        roomsCreated: totals.created,
        roomsClosed: totals.closed,
        connects: totals.connects,
        disconnects: totals.disconnects,
        connectErrors,
        latencyMs: { p50: all.p50, p99: all.p99, max: all.max },
      },
      lateExamples,
      failures,
    };
  } finally {
    await Promise.allSettled(agents.map((a) => a.close()));
    await admin?.close().catch(() => undefined);
    await backbone.stop();
    if (failures.length > 0) {
      // What a failure needs to be explained (nats-server's log, the backbone's output) outlives
      // the run; the JetStream store, the bulk of the home, does not.
      const kept = await mkdtemp(join(tmpdir(), 'parley-soak-failed-'));
      await cp(join(home, 'nats', 'nats-server.log'), join(kept, 'nats-server.log')).catch(() => undefined);
      await writeFile(join(kept, 'backbone.log'), backbone.output());
      log(`failed run: nats-server's log and the backbone's output kept in ${kept}`);
    }
    await rm(home, { recursive: true, force: true });
  }
}

const HEADER = `${'time'.padStart(6)} ${'sent/s'.padStart(7)} ${'deliv/s'.padStart(8)} ${'p50 ms'.padStart(7)} ${'p99 ms'.padStart(7)} ${'max ms'.padStart(7)} ${'late'.padStart(5)} ${'p99 in|hd'.padStart(11)} ${'rooms +/-'.padStart(9)} ${'conn +/-'.padStart(9)} ${'nats MB'.padStart(8)} ${'settled'.padStart(8)} ${'svc MB'.padStart(7)} ${'agents MB'.padStart(9)} ${'cpu% n/s/a'.padStart(12)} ${'runq% n/s/a'.padStart(13)} ${'wait%'.padStart(5)} ${'load'.padStart(5)}`;

function formatRow(iv: SoakInterval): string {
  const ms = (n: number) => (Number.isNaN(n) ? '-' : String(Math.round(n * 10) / 10));
  const mmss = `${Math.floor(iv.at / 60)}:${String(iv.at % 60).padStart(2, '0')}`;
  return `${(iv.warmup ? `w ${mmss}` : mmss).padStart(6)} ${String(iv.sentPerSec).padStart(7)} ${String(iv.deliveriesPerSec).padStart(8)} ${ms(iv.latencyMs.p50).padStart(7)} ${ms(iv.latencyMs.p99).padStart(7)} ${ms(iv.latencyMs.max).padStart(7)} ${String(iv.late).padStart(5)} ${`${ms(Math.round(iv.stageP99Ms.toInbox))}|${ms(Math.round(iv.stageP99Ms.toHandler))}`.padStart(11)} ${`${iv.roomsCreated}/${iv.roomsClosed}`.padStart(9)} ${`${iv.connects}/${iv.disconnects}${iv.connectErrors ? `!${iv.connectErrors}` : ''}`.padStart(9)} ${String(iv.rssMb.natsServer).padStart(8)} ${ms(iv.natsSettledMb).padStart(8)} ${String(iv.rssMb.services).padStart(7)} ${String(iv.rssMb.agents).padStart(9)} ${`${iv.cpuPct.natsServer}/${iv.cpuPct.services}/${iv.cpuPct.agents}`.padStart(12)} ${`${iv.runQueuePct.natsServer}/${iv.runQueuePct.services}/${iv.runQueuePct.agents}`.padStart(13)} ${String(iv.waitSharePct).padStart(5)} ${String(iv.load).padStart(5)}`;
}

/** The table over time (one row per interval; `w` marks warm-up rows) and the verdict. */
export function formatSoak(r: SoakResult): string {
  const lines = [
    `soak: ${round(r.minutes, 2)} min at ${r.rate} room messages/s × ${r.membersPerRoom} members (${r.capacity.source === 'probe' ? `${(r.capacity.fraction ?? 0) * 100}% of ${r.capacity.deliveriesPerSec} deliveries/s measured` : 'set by --rate'}); warm-up ${r.warmupSeconds} s, growth windows ${r.windowSeconds} s`,
    HEADER,
    ...r.intervals.map(formatRow),
    '',
    `totals: ${r.totals.accepted} accepted, ${r.totals.deliveries} deliveries, ${r.totals.roomsCreated} rooms created / ${r.totals.roomsClosed} closed, ${r.totals.connects} connects / ${r.totals.disconnects} disconnects (failed and tried again: ${JSON.stringify(r.totals.connectErrors)}); sends refused ${JSON.stringify(r.totals.refused)}`,
    `latency (uniform sample of ${Math.min(20_000, r.totals.deliveries)} deliveries): p50 ${r.totals.latencyMs.p50} ms, p99 ${r.totals.latencyMs.p99} ms, max ${r.totals.latencyMs.max} ms; late after warm-up: ${r.totals.late}, of which ${r.totals.lateWhileStarved} in intervals where the processes waited for a CPU at least as long as they ran (wait% ≥ 50); ≈${r.totals.lateMachineSharePct}% of the late deliveries' time was run-queue wait (latency × the interval's wait%)`,
    `growth after warm-up (median of first vs last ${r.windowSeconds} s${r.growthChecked ? '' : '; measured, not judged in this form'}): ${PROCESSES.map((p) => `${p}${r.growth[p].measure === 'settled' ? ' (settled)' : ''} ${r.growth[p].firstMb} → ${r.growth[p].lastMb} MB (${round(r.growth[p].growth * 100)}%)`).join(', ')}; nats-server RSS ${r.natsRssGrowth.firstMb} → ${r.natsRssGrowth.lastMb} MB (${round(r.natsRssGrowth.growth * 100)}%)${r.settled.length ? `; last settled sample: live heap ${r.settled.at(-1)?.heapAllocMb} MB, freed heap kept ${r.settled.at(-1)?.idleKeptMb} MB` : ''}`,
    r.failures.length ? `FAILED:\n  ${r.failures.slice(0, 30).join('\n  ')}` : 'passed',
  ];
  return lines.join('\n');
}
