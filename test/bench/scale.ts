/**
 * The scale benchmark (`pnpm bench:scale`): what 100 → 1,000 → 10,000 registered agents cost.
 *
 * The backbone runs in its own process (scale-backbone.ts: the standalone backbone, or the
 * services on a 3-node cluster); the connected agents in a few worker processes (scale-worker.ts).
 * For each tier of registered agents it:
 *
 * 1. registers agents through the registry (`registry.createAgent` as the local admin: the inbox
 *    consumer and creds minted by governance, as `parley agent create` does), and creates rooms of
 *    2–8 members, each by its first member (`rooms.create`);
 * 2. times the server's creation of one more inbox consumer (JetStream `consumers.add` on the
 *    inbox stream, with every registered agent's consumer already there);
 * 3. measures idle cost with no agent connected (nats-server and services CPU and RSS);
 * 4. connects N agents at once through the SDK (presence on, each handling its inbox) and times
 *    connect and inbox attach; measures idle cost again, per connected agent;
 * 5. sends a burst (capacity: deliveries/s), then room messages at a fixed rate — the same at
 *    every tier, a fraction of the first tier's capacity — and measures send→handler latency and
 *    CPU per delivery; checks every message reached every member;
 * 6. disconnects the agents.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { credsAuthenticator, connect as natsConnect } from '@nats-io/transport-node';
import { inboxStream, inboxStreams, registryApi } from '@parley/contracts';
import { inboxConsumerConfig } from '@parley/kit';
import { connect } from '@parley/sdk';
import type { WorkerAgent, WorkerReply, WorkerRequest, WorkerRoom } from './scale-worker.js';
import { childPids, cpuSeconds, percentiles, windowed } from './stats.js';

/** Options of {@link runScale}. */
export interface ScaleOptions {
  /** Registered agents at the end (the last tier). @default 10000 */
  agents: number;
  /** Rooms at the end, created in proportion to the agents at each tier. @default 5000 */
  rooms: number;
  /** Agents connected at once at each tier (the last value repeats; capped at the tier's agents). */
  connect: number[];
  /** Run on the 3-node JetStream cluster instead of the standalone backbone. */
  cluster: boolean;
  /** Processes holding the connected agents. @default 4 */
  workers: number;
  /** Seconds of each idle measurement. @default 10 */
  idleSeconds: number;
  /** Seconds of sending at the fixed rate. @default 10 */
  rateSeconds: number;
  /** Room messages in each capacity burst. @default 3000 */
  burstMessages: number;
  /** The fixed rate, as a fraction of the first tier's measured capacity. @default 0.25 */
  fraction: number;
  /** Samples of inbox consumer creation per tier. @default 20 */
  consumerSamples: number;
  /** Progress lines. */
  progress: (line: string) => void;
  /** Called with the result so far after each tier (a long run that dies keeps what it measured). */
  onStep?: (partial: ScaleResult) => unknown;
}

/** Percentiles in milliseconds. */
export interface Ms {
  p50: number;
  p99: number;
}

/** Idle cost over a few seconds. */
export interface Idle {
  seconds: number;
  /** Percent of one core, summed over every nats-server node. */
  natsCpuPercent: number;
  servicesCpuPercent: number;
  /** Resident memory now, summed over every nats-server node. */
  natsRssMb: number;
  servicesRssMb: number;
  /** /proc/loadavg (1, 5, 15 min) at the end: the machine is shared, so every figure carries it. */
  loadAverage: number[];
}

/** One tier of registered agents. */
export interface ScaleStep {
  registeredAgents: number;
  rooms: number;
  /** Consumers on the inbox stream (one per registered participant). */
  inboxConsumers: number;
  register: { count: number; perSec: number; ms: Ms };
  /** Room creations, with the connects its owners had to try again (UNAVAILABLE: a loaded machine). */
  roomCreate: { count: number; ms: Ms; connectRetries: number };
  /** JetStream `consumers.add` of one more inbox consumer, with the tier's consumers there. */
  inboxConsumerCreateMs: Ms;
  idleRegistered: Idle;
  connected: number;
  /** SDK `connect()` (NATS connect with creds, whoami-free) per agent. */
  connectMs: Ms;
  /** From connected to receiving: subscribe + `rooms.attachInbox` (the consumer pointed at it). */
  attachMs: Ms;
  /** Wall time to connect all of them at once, in the worker processes. */
  connectAllSeconds: number;
  idleConnected: Idle & {
    /** nats-server memory per connected agent, over the same tier with none connected. */
    natsKbPerConnectedAgent: number;
    /** CPU per connected agent, nats-server + services, in percent of a core. */
    cpuPercentPerConnectedAgent: number;
  };
  /** Rooms all of whose members are connected (the ones sent in). */
  activeRooms: number;
  burst: { messages: number; deliveries: number; deliveriesPerSec: number };
  fixedRate: {
    roomMessagesPerSec: number;
    sent: number;
    expectedDeliveries: number;
    delivered: number;
    deliveriesPerSec: number;
    latencyMs: Ms & { p95: number };
    /** CPU per delivery, microseconds. */
    cpuUsPerDelivery: { nats: number; services: number };
    /** /proc/loadavg when the fixed rate ended. */
    loadAverage: number[];
  };
  sendFailures: string[];
  connectFailures: string[];
  /** Connects tried again after UNAVAILABLE / DEADLINE_EXCEEDED (each agent up to 5 times). */
  connectRetries: number;
  workersRssMb: number[];
}

/** What {@link runScale} measured. */
export interface ScaleResult {
  topology: 'standalone' | 'cluster';
  options: Omit<ScaleOptions, 'progress'>;
  steps: ScaleStep[];
  env: { natsServer: string; node: string; cpus: number; memoryGb: number };
  loadAverage: { start: number[]; end: number[] };
  startedAt: string;
  seconds: number;
}

const round = (x: number, digits = 2) => Math.round(x * 10 ** digits) / 10 ** digits;
const ms = (values: number[]): Ms => {
  const p = percentiles(values);
  return { p50: p.p50, p99: p.p99 };
};
const load = () => loadavg().map((x) => round(x));

/** The tiers of registered agents: 100, 1,000, 10,000, … up to `agents` (which is always last). */
export function tiers(agents: number): number[] {
  const out: number[] = [];
  for (let t = 100; t < agents; t *= 10) out.push(t);
  out.push(agents);
  return out;
}

/** Members of room `r` among `agents` registered ones: 2–8 consecutive agents from 2r. */
export function roomMembers(r: number, agents: number): number[] {
  const size = Math.min(2 + (r % 7), agents);
  return Array.from({ length: size }, (_, i) => (2 * r + i) % agents);
}

/** Every process below `pid` whose command is `nats-server`. */
function natsServerPids(pid: number): number[] {
  const out: number[] = [];
  const walk = (p: number) => {
    for (const c of childPids(p)) {
      try {
        if (readFileSync(`/proc/${c}/comm`, 'utf8').trim() === 'nats-server') out.push(c);
      } catch {}
      walk(c);
    }
  };
  walk(pid);
  return out;
}

/** Resident memory of a process now (VmRSS), in MB. */
function rssMb(pid: number): number {
  try {
    const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

/** A child process that answers requests over IPC in order. */
class Rpc<Req, Rep> {
  readonly #pending: ((m: Rep) => void)[] = [];
  constructor(readonly child: ChildProcess) {
    child.on('message', (m) => this.#pending.shift()?.(m as Rep));
  }
  request(m: Req): Promise<Rep> {
    return new Promise((resolve, reject) => {
      const onExit = (code: number | null) => reject(new Error(`worker ${this.child.pid} exited (${code})`));
      this.child.once('exit', onExit);
      this.#pending.push((r) => {
        this.child.off('exit', onExit);
        resolve(r);
      });
      this.child.send(m as object);
    });
  }
}

const here = import.meta.dirname;
// The children run the TypeScript sources, as the other benches do.
const childExecArgv = ['--import', 'tsx', '--conditions=@parley/source', '--max-old-space-size=4096'];

/** Runs the scale benchmark and returns what it measured (progress goes to `options.progress`). */
export async function runScale(o: ScaleOptions): Promise<ScaleResult> {
  const started = performance.now();
  const startedAt = new Date().toISOString();
  const loadStart = load();
  const progress = o.progress;
  const host = fork(join(here, 'scale-backbone.ts'), o.cluster ? ['--cluster'] : [], {
    // PARLEY_SCALE_CPU_PROF=<dir>: a V8 CPU profile of the services, written when they stop.
    execArgv: process.env.PARLEY_SCALE_CPU_PROF
      ? [...childExecArgv, '--cpu-prof', `--cpu-prof-dir=${process.env.PARLEY_SCALE_CPU_PROF}`]
      : childExecArgv,
    cwd: join(here, '..'),
    env: { ...process.env, LOG_LEVEL: 'warn', NODE_OPTIONS: '' },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const workers: Rpc<WorkerRequest, WorkerReply>[] = [];
  const cleanups: (() => Promise<unknown>)[] = [];
  const killAll = () => {
    for (const w of workers) w.child.kill('SIGKILL');
    if (host.exitCode === null) host.kill('SIGTERM');
  };
  process.once('exit', killAll);
  try {
    progress(`starting the ${o.cluster ? '3-node cluster' : 'standalone backbone'}`);
    const [ready] = (await Promise.race([
      once(host, 'message'),
      once(host, 'exit').then(([code]) => {
        throw new Error(`the backbone process exited (${code})`);
      }),
    ])) as [{ servers: string[]; adminCreds: string; serviceCreds: string }];
    const servers = ready.servers;
    const hostPid = host.pid ?? 0;
    const natsPids = natsServerPids(hostPid);
    if (natsPids.length === 0) throw new Error('no nats-server process found below the backbone process');
    const service = await natsConnect({
      servers,
      authenticator: credsAuthenticator(new TextEncoder().encode(ready.serviceCreds)),
      noAsyncTraces: true,
    });
    cleanups.push(() => service.close());
    const natsServer = service.info?.version ?? 'unknown';
    const jsm = await jetstreamManager(service, { timeout: 30_000 });
    const admin = await connect({ servers, creds: ready.adminCreds, presence: false });
    cleanups.push(() => admin.close());

    for (let i = 0; i < o.workers; i++) {
      workers.push(
        new Rpc(
          fork(join(here, 'scale-worker.ts'), [], {
            execArgv: childExecArgv,
            cwd: join(here, '..'),
            env: { ...process.env, NODE_OPTIONS: '' },
            stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
          }),
        ),
      );
    }

    const idle = async (seconds: number): Promise<Idle> => {
      const pids = [hostPid, ...natsPids];
      const before = pids.map((p) => cpuSeconds(p) ?? 0);
      const t0 = performance.now();
      await new Promise((r) => setTimeout(r, seconds * 1000));
      const wall = (performance.now() - t0) / 1000;
      const used = pids.map((p, i) => (cpuSeconds(p) ?? 0) - (before[i] ?? 0));
      const [services = 0, ...nats] = used;
      return {
        seconds: round(wall),
        natsCpuPercent: round((nats.reduce((a, b) => a + b, 0) / wall) * 100),
        servicesCpuPercent: round((services / wall) * 100),
        natsRssMb: round(
          natsPids.reduce((a, p) => a + rssMb(p), 0),
          1,
        ),
        servicesRssMb: round(rssMb(hostPid), 1),
        loadAverage: load(),
      };
    };
    const cpuOf = () => ({
      nats: natsPids.reduce((a, p) => a + (cpuSeconds(p) ?? 0), 0),
      services: cpuSeconds(hostPid) ?? 0,
    });

    const registered: WorkerAgent[] = [];
    const roomIds: string[] = [];
    const roomMemberIdx: number[][] = [];
    const steps: ScaleStep[] = [];
    let fixedRoomRate: number | undefined;
    const connectList = o.connect.length ? o.connect : [100];

    for (const [ti, tier] of tiers(o.agents).entries()) {
      // 1. Register up to the tier, then the tier's share of rooms.
      const first = registered.length;
      const registerMs: number[] = [];
      const r0 = performance.now();
      progress(`tier ${tier}: registering agents ${first}…${tier - 1}`);
      await windowed(tier - first, 16, async (i) => {
        const index = first + i;
        const t = performance.now();
        // A busy machine queues registrations: give each one time rather than fail the run.
        const c = await admin.call(
          registryApi.createAgent,
          { card: { name: `scale-${index}` } },
          { timeout: 30_000 },
        );
        registerMs.push(performance.now() - t);
        registered[index] = { index, id: c.agent.id, creds: c.credentials.creds };
        if (registerMs.length % 1000 === 0) progress(`  ${registerMs.length} registered`);
      });
      const registerSeconds = (performance.now() - r0) / 1000;
      const roomsAtTier = Math.max(1, Math.round((o.rooms * tier) / o.agents));
      const firstRoom = roomIds.length;
      const roomMs: number[] = [];
      progress(`tier ${tier}: creating rooms ${firstRoom}…${roomsAtTier - 1}`);
      const roomJobs = workers.map(() => [] as { r: number; owner: string; members: string[] }[]);
      for (let r = firstRoom; r < roomsAtTier; r++) {
        const members = roomMembers(r, tier);
        const [ownerIdx, ...rest] = members as [number, ...number[]];
        roomJobs[r % workers.length]?.push({
          r,
          owner: registered[ownerIdx]?.creds ?? '',
          members: rest.map((m) => registered[m]?.id ?? ''),
        });
        roomMemberIdx[r] = members;
      }
      const made = await Promise.all(
        workers.map((w, i) =>
          w.request({ type: 'createRooms', servers, rooms: roomJobs[i] ?? [], window: 4 }),
        ),
      );
      const roomFailures: string[] = [];
      let roomRetries = 0;
      for (const m of made) {
        if (m.type !== 'rooms') continue;
        roomRetries += m.retries;
        for (const c of m.created) {
          roomIds[c.r] = c.id;
          roomMs.push(c.ms);
        }
        roomFailures.push(...m.failures);
      }
      if (roomFailures.length) throw new Error(`rooms not created:\n${roomFailures.join('\n')}`);

      // 2. One more inbox consumer, with the tier's there.
      const consumerMs: number[] = [];
      for (let i = 0; i < o.consumerSamples; i++) {
        const id = `agt_SCALEPROBE${ti}X${i}`;
        const t = performance.now();
        await jsm.consumers.add(inboxStream(id), inboxConsumerConfig(id, { inboxConsumerReplicas: 1 }));
        consumerMs.push(performance.now() - t);
        await jsm.consumers.delete(inboxStream(id), id);
      }
      let inboxConsumers = 0;
      for (const stream of inboxStreams())
        inboxConsumers += (await jsm.streams.info(stream)).state.consumer_count;

      // 3. Idle, nobody connected.
      progress(`tier ${tier}: idle with nobody connected (${o.idleSeconds} s)`);
      const idleRegistered = await idle(o.idleSeconds);

      // 4. Connect N at once, spread over the workers.
      const n = Math.min(tier, connectList[Math.min(ti, connectList.length - 1)] ?? tier);
      const byWorker = workers.map(() => ({ agents: [] as WorkerAgent[], rooms: [] as WorkerRoom[] }));
      for (let i = 0; i < n; i++) {
        const a = registered[i];
        if (a) byWorker[i % workers.length]?.agents.push(a);
      }
      progress(`tier ${tier}: connecting ${n} agents in ${workers.length} processes`);
      const c0 = performance.now();
      const connected = await Promise.all(
        workers.map((w, i) =>
          w.request({
            type: 'connect',
            servers,
            agents: byWorker[i]?.agents ?? [],
            window: 16,
          }),
        ),
      );
      const connectAllSeconds = (performance.now() - c0) / 1000;
      const connectMs: number[] = [];
      const attachMs: number[] = [];
      const connectFailures: string[] = [];
      const isConnected = new Set<number>();
      let connectRetries = 0;
      for (const c of connected) {
        if (c.type !== 'connected') continue;
        connectMs.push(...c.connectMs);
        attachMs.push(...c.listenMs);
        connectFailures.push(...c.failures);
        for (const i of c.connected) isConnected.add(i);
        connectRetries += c.retries;
      }
      // Sent in: the rooms all of whose members are connected, each by its owner.
      const active: number[] = [];
      for (let r = 0; r < roomIds.length; r++) {
        if ((roomMemberIdx[r] ?? []).every((m) => isConnected.has(m))) active.push(r);
      }
      for (const r of active) {
        const owner = roomMemberIdx[r]?.[0] ?? 0;
        byWorker[owner % workers.length]?.rooms.push({ id: roomIds[r] ?? '', owner });
      }
      await Promise.all(
        workers.map((w, i) => w.request({ type: 'sendIn', rooms: byWorker[i]?.rooms ?? [] })),
      );
      if (connectFailures.length)
        progress(`tier ${tier}: connect failures:\n  ${connectFailures.slice(0, 5).join('\n  ')}`);
      progress(`tier ${tier}: idle with ${connectMs.length} connected (${o.idleSeconds} s)`);
      const idleC = await idle(o.idleSeconds);
      const connectedCount = Math.max(1, connectMs.length);

      // 5. Capacity burst, then the fixed rate.
      const members = (r: number) => roomMemberIdx[r]?.length ?? 0;
      const membersOf = new Map(active.map((r) => [roomIds[r] ?? '', members(r)]));
      const expectedFor = (messagesPerWorker: number[]) =>
        messagesPerWorker.reduce((sum, m, w) => {
          const rooms = byWorker[w]?.rooms ?? [];
          let e = 0;
          for (let i = 0; i < m && rooms.length; i++) {
            const room = rooms[i % rooms.length];
            e += membersOf.get(room?.id ?? '') ?? 0;
          }
          return sum + e;
        }, 0);
      const split = (total: number) => {
        const withRooms = byWorker.map((b) => b.rooms.length);
        const all = withRooms.reduce((a, b) => a + b, 0) || 1;
        return withRooms.map((k) => Math.round((total * k) / all));
      };
      const stats = async () => {
        const s = await Promise.all(workers.map((w) => w.request({ type: 'stats' })));
        let delivered = 0;
        const latencies: number[] = [];
        const rss: number[] = [];
        for (const x of s) {
          if (x.type !== 'stats') continue;
          delivered += x.delivered;
          for (const l of x.latencies) latencies.push(l);
          rss.push(x.rssMb);
        }
        return { delivered, latencies, rss };
      };
      const waitDelivered = async (target: number) => {
        // Deliveries are counted by the workers' handlers; a message not delivered within a minute
        // after the last send is reported as missing.
        let last = await stats();
        const latencies = [...last.latencies];
        let deadline = performance.now() + 60_000;
        let seen = last.delivered;
        while (last.delivered < target && performance.now() < deadline) {
          await new Promise((r) => setTimeout(r, 100));
          last = await stats();
          for (const l of last.latencies) latencies.push(l);
          if (last.delivered > seen) {
            seen = last.delivered;
            deadline = Math.max(deadline, performance.now() + 20_000);
          }
        }
        return { delivered: last.delivered, latencies, rss: last.rss };
      };
      const sendFailures: string[] = [];
      const burstSplit = split(o.burstMessages);
      const burstExpected = expectedFor(burstSplit);
      if (ti === 0) {
        // A first burst warms up every process (JIT, connections, caches); the fixed rate comes from
        // the second.
        const w0 = (await stats()).delivered;
        await Promise.all(
          workers.map((w, i) => w.request({ type: 'burst', messages: burstSplit[i] ?? 0, window: 64 })),
        );
        await waitDelivered(w0 + burstExpected);
      }
      const base = (await stats()).delivered;
      progress(`tier ${tier}: burst of ${o.burstMessages} room messages in ${active.length} rooms`);
      const b0 = performance.now();
      const burstSent = await Promise.all(
        workers.map((w, i) => w.request({ type: 'burst', messages: burstSplit[i] ?? 0, window: 64 })),
      );
      for (const s of burstSent) if (s.type === 'sent') sendFailures.push(...s.failures);
      const afterBurst = await waitDelivered(base + burstExpected);
      const burstSeconds = (performance.now() - b0) / 1000;
      const burstDeliveries = afterBurst.delivered - base;
      const capacity = burstDeliveries / burstSeconds;
      const avgMembers = active.length ? active.reduce((a, r) => a + members(r), 0) / active.length : 1;
      fixedRoomRate ??= Math.max(1, Math.round((capacity * o.fraction) / avgMembers));
      const rateSplit = split(fixedRoomRate);
      const rateExpected = expectedFor(rateSplit.map((r) => Math.round(r * o.rateSeconds)));
      progress(`tier ${tier}: ${fixedRoomRate} room messages/s for ${o.rateSeconds} s`);
      const cpu0 = cpuOf();
      const f0 = performance.now();
      const rateBase = afterBurst.delivered;
      const rateSent = await Promise.all(
        workers.map((w, i) => w.request({ type: 'rate', perSec: rateSplit[i] ?? 0, seconds: o.rateSeconds })),
      );
      for (const s of rateSent) if (s.type === 'sent') sendFailures.push(...s.failures);
      const afterRate = await waitDelivered(rateBase + rateExpected);
      const rateSeconds = (performance.now() - f0) / 1000;
      const cpu1 = cpuOf();
      const rateLoad = load();
      const rateDelivered = afterRate.delivered - rateBase;
      const lat = percentiles(afterRate.latencies);
      const perDelivery = (s: number) => round((s / Math.max(1, rateDelivered)) * 1e6, 1);

      const step: ScaleStep = {
        registeredAgents: tier,
        rooms: roomIds.length,
        inboxConsumers,
        register: {
          count: registerMs.length,
          perSec: round(registerMs.length / registerSeconds, 1),
          ms: ms(registerMs),
        },
        roomCreate: { count: roomMs.length, ms: ms(roomMs), connectRetries: roomRetries },
        inboxConsumerCreateMs: ms(consumerMs),
        idleRegistered,
        connected: connectMs.length,
        connectMs: ms(connectMs),
        attachMs: ms(attachMs),
        connectAllSeconds: round(connectAllSeconds),
        idleConnected: {
          ...idleC,
          natsKbPerConnectedAgent: round(
            ((idleC.natsRssMb - idleRegistered.natsRssMb) * 1024) / connectedCount,
          ),
          cpuPercentPerConnectedAgent: round(
            (idleC.natsCpuPercent + idleC.servicesCpuPercent) / connectedCount,
            4,
          ),
        },
        activeRooms: active.length,
        burst: {
          messages: o.burstMessages,
          deliveries: burstDeliveries,
          deliveriesPerSec: Math.round(capacity),
        },
        fixedRate: {
          roomMessagesPerSec: fixedRoomRate,
          sent: rateSplit.reduce((a, r) => a + Math.round(r * o.rateSeconds), 0),
          expectedDeliveries: rateExpected,
          delivered: rateDelivered,
          deliveriesPerSec: Math.round(rateDelivered / rateSeconds),
          latencyMs: { p50: lat.p50, p95: lat.p95, p99: lat.p99 },
          cpuUsPerDelivery: {
            nats: perDelivery(cpu1.nats - cpu0.nats),
            services: perDelivery(cpu1.services - cpu0.services),
          },
          loadAverage: rateLoad,
        },
        sendFailures,
        connectFailures,
        connectRetries,
        workersRssMb: afterRate.rss,
      };
      steps.push(step);
      progress(
        `tier ${tier}: ${step.connected} connected; connect p50 ${step.connectMs.p50} ms, attach p50 ${step.attachMs.p50} ms; burst ${step.burst.deliveriesPerSec} deliveries/s; at ${fixedRoomRate}/s p99 ${lat.p99} ms; delivered ${rateDelivered}/${rateExpected}; nats ${idleC.natsRssMb} MB, services ${idleC.servicesRssMb} MB`,
      );

      await o.onStep?.(result());

      // 6. Disconnect before the next tier.
      await Promise.all(workers.map((w) => w.request({ type: 'close' })));
    }
    return result();
    function result(): ScaleResult {
      return {
        topology: o.cluster ? 'cluster' : 'standalone',
        options: { ...o, progress: undefined, onStep: undefined } as unknown as Omit<
          ScaleOptions,
          'progress'
        >,
        steps,
        env: {
          natsServer,
          node: process.version,
          cpus: cpus().length,
          memoryGb: Math.round(totalmem() / 2 ** 30),
        },
        loadAverage: { start: loadStart, end: load() },
        startedAt,
        seconds: Math.round((performance.now() - started) / 1000),
      };
    }
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
    for (const w of workers) {
      w.child.disconnect?.();
      if (w.child.exitCode === null)
        await Promise.race([once(w.child, 'exit'), new Promise((r) => setTimeout(r, 5000))]);
      if (w.child.exitCode === null) w.child.kill('SIGKILL');
    }
    if (host.exitCode === null) {
      host.send({ type: 'stop' });
      await Promise.race([once(host, 'exit'), new Promise((r) => setTimeout(r, 30_000))]);
      if (host.exitCode === null) host.kill('SIGKILL');
    }
    process.off('exit', killAll);
  }
}
