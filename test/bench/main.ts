/**
 * `pnpm bench`: Parley's message path against raw JetStream doing the same work on the same
 * nats-server, and against A2A JSON-RPC over HTTP, in one run; the same Parley run with tracing on
 * (100% sampling, exported to a receiver in its own process); onboarding time; registry search at
 * 10,000 agents. Progress goes to stderr; the table (or `--json`) to stdout.
 *
 * Throughput is the median of `--runs` (3) interleaved raw/Parley runs; latency is measured at 25%,
 * 50% and 75% of Parley's measured capacity (p50/p99/p99.9/max, and per stage for Parley); the cost
 * of the 300 connected idle agents is measured before anything is sent (30 s, from 5 s after their
 * setup), and the backbone's with nobody connected before that.
 *
 * Flags: `pnpm bench --help`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { credsAuthenticator, connect as natsConnect } from '@nats-io/transport-node';
import { coalesceWrites } from '@parley/contracts';
import { KeyMaterial, mintServiceCreds } from '@parley/keys';
import { loadTelemetryConfig, silentLogger, startTelemetry } from '@parley/kit';
import { freePort } from '@parley/nats-server';
import { benchA2a } from './a2a.js';
import { usageError, wholeNumber } from './cli.js';
import { setupParley } from './parley.js';
import { setupRaw } from './raw.js';
import { benchRegistrySearch } from './registry.js';
import {
  childPids,
  coresBusy,
  cpuDuring,
  gcSeconds,
  type LoopDelay,
  loopDelayDuring,
  median,
  peakRssMb,
  perDeliveryUs,
  profiled,
  progress,
  servicesLoopDelay,
} from './stats.js';

const usage = `pnpm bench [options]

  Parley's message path against raw JetStream on the same nats-server (throughput: the median of
  interleaved runs; latency at 25%, 50% and 75% of Parley's capacity), the cost of 300 idle agents,
  A2A over HTTP, the same Parley run with tracing on, onboarding, and registry search.

  --messages <n>         room messages per throughput run            default 20000 (3000 with --quick)
  --runs <n>             interleaved raw/Parley throughput runs      default 3
  --registry-agents <n>  agents for the registry search; 0 skips it  default 10000 (500 with --quick)
  --no-tracing           skip the tracing-on run
  --quick                small sizes, for a smoke run
  --series               print each latency run's median and worst per half second (stderr)
  --json                 print the result as JSON (progress still goes to stderr)
  --help                 this text

  PARLEY_BENCH_PROFILE=<dir> writes CPU profiles of the backbone, and of the bench's own process
  during each throughput run (bench-raw-<i>, bench-parley-<i>) and latency run (bench-raw-at-<percent>,
  bench-parley-at-<percent>).
`;
let parsed: ReturnType<typeof parse>;
function parse() {
  return parseArgs({
    options: {
      json: { type: 'boolean', default: false },
      quick: { type: 'boolean', default: false },
      series: { type: 'boolean', default: false },
      tracing: { type: 'boolean', default: true },
      messages: { type: 'string' },
      runs: { type: 'string' },
      'registry-agents': { type: 'string' },
      help: { type: 'boolean', default: false },
    },
    allowNegative: true,
  });
}
try {
  parsed = parse();
} catch (err) {
  usageError((err as Error).message, usage);
}
const args = parsed.values;
if (args.help) {
  process.stdout.write(usage);
  process.exit(0);
}
const count = (name: string, value: string | undefined, fallback: number, min: number) =>
  wholeNumber(usage, name, value, fallback, min);
const quick = args.quick ?? false;
const messages = count('messages', args.messages, quick ? 3_000 : 20_000, 1);
const registryAgents = count('registry-agents', args['registry-agents'], quick ? 500 : 10_000, 0);
const shape = {
  rooms: 100,
  membersPerRoom: 3,
  payloadBytes: 512,
  messages,
  latencySeconds: quick ? 2 : 5,
  // Sent at the run's rate before the measured seconds, not counted (see LatencyOptions).
  warmupSeconds: quick ? 0.5 : 1,
  idleSeconds: quick ? 3 : 30,
  settleSeconds: quick ? 1 : 5,
};
const latencyOptions = { warmupSeconds: shape.warmupSeconds };
const root = resolve(import.meta.dirname, '../..');
const profileDir = process.env.PARLEY_BENCH_PROFILE;

/** The Node flags `npm start` runs the backbone with (its young-generation size). */
const startFlags = (
  JSON.parse(await readFile(join(root, 'package.json'), 'utf8')) as { scripts: { start: string } }
).scripts.start
  .split(' ')
  .filter((a) => a.startsWith('--'));

/**
 * The standalone backbone, built (`dist/`), in a process of its own so its CPU and memory show, with
 * the Node flags `npm start` gives it.
 */
async function startBackbone(env: Record<string, string> = {}) {
  const home = await mkdtemp(join(tmpdir(), 'parley-bench-'));
  const natsPort = await freePort();
  const httpPort = await freePort();
  const child: ChildProcess = spawn(
    process.execPath,
    [
      ...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []),
      ...startFlags,
      'services/standalone/dist/main.js',
      '--no-demo',
      '--home',
      home,
      '--nats-port',
      String(natsPort),
      '--http-port',
      String(httpPort),
      // Not the default 7422: another process on the machine may hold it.
      '--nats-ws-port',
      String(await freePort()),
    ],
    {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        LOG_LEVEL: 'warn',
        NODE_OPTIONS: '',
        // The benchmark's agents send as fast as they can, with no human in the rooms: the traffic
        // guards (rate limits, runaway detector) would stop them. They stay in the path, idle.
        PARLEY_RATE_AGENT_PER_SEC: '0',
        PARLEY_RATE_ROOM_PER_SEC: '0',
        PARLEY_RUNAWAY_MESSAGES: '0',
        ...env,
      },
    },
  );
  // A bench that fails must not leave its backbone (and its nats-server) running.
  process.once('exit', () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  });
  let out = '';
  // The services' warnings (fan-out restarts, lease changes) explain stalls: keep them.
  child.stderr?.pipe(createWriteStream(join(home, 'services.log')));
  await new Promise<void>((ok, fail) => {
    const on = (d: Buffer) => {
      out += d;
      if (out.includes('Parley is running')) ok();
    };
    child.stdout?.on('data', on);
    child.stderr?.on('data', on);
    child.once('exit', (code) => fail(new Error(`backbone exited (${code}):\n${out}`)));
  });
  const keys = KeyMaterial.parse(JSON.parse(await readFile(join(home, 'keys.json'), 'utf8')));
  const creds = new TextEncoder().encode((await mintServiceCreds(keys, 'bench')).creds);
  const natsUrl = `nats://127.0.0.1:${natsPort}`;
  return {
    natsUrl,
    adminCreds: join(home, 'creds', 'admin.creds'),
    metricsUrl: `http://127.0.0.1:${httpPort}/metrics`,
    pids: { bench: process.pid, services: child.pid, natsServer: childPids(child.pid ?? 0)[0] },
    // Raw JetStream's connections write as Parley's do (coalesceWrites: the services' and the SDK's),
    // so the comparison stays fair.
    connect: async () => {
      const nc = await natsConnect({
        servers: natsUrl,
        authenticator: credsAuthenticator(creds),
        noAsyncTraces: true,
      });
      coalesceWrites(nc);
      return nc;
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      await once(child, 'exit');
      if (process.env.PARLEY_BENCH_KEEP) progress(`kept ${home}`);
      else await rm(home, { recursive: true, force: true });
    },
  };
}
type Backbone = Awaited<ReturnType<typeof startBackbone>>;

const runs = count('runs', args.runs, 3, 1);
const loads = [0.25, 0.5, 0.75];
const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
const perCore = (cpu: Record<string, number>, wall: number, keys: string[]) =>
  Math.round((keys.reduce((sum, k) => sum + (cpu[k] ?? 0), 0) / wall) * 10_000) / 100;

let backbone = await startBackbone();
const probe = await backbone.connect();
const natsServer = probe.info?.version ?? 'unknown';
await probe.close();
const parleyOptions = (b: Backbone) => ({
  natsUrl: b.natsUrl,
  adminCreds: b.adminCreds,
  rooms: shape.rooms,
  membersPerRoom: shape.membersPerRoom,
  payloadBytes: shape.payloadBytes,
  window: 256,
});

try {
  progress(
    `${shape.rooms} rooms × ${shape.membersPerRoom} members, ${messages} messages of ${shape.payloadBytes} B per throughput run, ${runs} interleaved runs each`,
  );
  // CPU with nothing sent: from a few seconds after what came before (a setup's membership events
  // are still being fanned out and checked), over a window long enough to hold the periodic work
  // (garbage collections, lease balances), which a 10 s window caught or missed by chance.
  const idleWindow = async () => {
    await new Promise((r) => setTimeout(r, shape.settleSeconds * 1000));
    return cpuDuring(backbone.pids, () => new Promise((r) => setTimeout(r, shape.idleSeconds * 1000)));
  };
  // The backbone on its own first, nobody connected (its services' timers, lease renewals,
  // partition heartbeats, nats-server's own housekeeping): what the agents add is the difference.
  const empty = await idleWindow();
  const parley = await setupParley(parleyOptions(backbone));
  // What connected, idle agents cost: the 300 agents of the benchmark.
  const idle = await idleWindow();
  const percentOfCore = perCore(idle.cpu, idle.wall, ['services', 'natsServer']);
  const nobodyConnected = perCore(empty.cpu, empty.wall, ['services', 'natsServer']);
  const idleCost = {
    agents: shape.rooms * shape.membersPerRoom,
    seconds: idle.wall,
    afterSetupSeconds: shape.settleSeconds,
    percentOfCore,
    cpuSeconds: idle.cpu,
    /** The same backbone before any agent existed. */
    nobodyConnectedPercentOfCore: nobodyConnected,
    /** What the connected agents add: the two measurements' difference. */
    agentsPercentOfCore: Math.round((percentOfCore - nobodyConnected) * 100) / 100,
  };
  progress(
    `idle: nobody connected ${idleCost.nobodyConnectedPercentOfCore}% of a core (services ${perCore(empty.cpu, empty.wall, ['services'])}%, nats-server ${perCore(empty.cpu, empty.wall, ['natsServer'])}%); ${idleCost.agents} agents connected ${idleCost.percentOfCore}% (services ${perCore(idle.cpu, idle.wall, ['services'])}%, nats-server ${perCore(idle.cpu, idle.wall, ['natsServer'])}%)`,
  );
  const raw = await setupRaw({
    connect: backbone.connect,
    rooms: shape.rooms,
    membersPerRoom: shape.membersPerRoom,
    payloadBytes: shape.payloadBytes,
    partitions: 16,
    batch: 100,
    window: 256,
    fanoutConnections: 2,
  });
  // Throughput: raw and Parley interleaved, so both see the same (shared, noisy) machine.
  const rawRuns: number[] = [];
  const parleyRuns: number[] = [];
  const cpu: { raw: unknown[]; parley: unknown[] } = { raw: [], parley: [] };
  const runDeliveries = messages * shape.membersPerRoom;
  // CPU and garbage-collection time per delivery of one throughput run (the services' GC is read
  // from their metrics: for raw's runs it is their idle work).
  const throughputRun = async (name: string, run: () => Promise<number>) => {
    const gc0 = await gcSeconds(backbone.metricsUrl);
    const r = await cpuDuring(backbone.pids, () => profiled(profileDir, name, run));
    const gc1 = await gcSeconds(backbone.metricsUrl);
    const gc = { bench: gc1.bench - gc0.bench, services: gc1.services - gc0.services };
    return {
      result: r.result,
      cpu: r.cpu,
      figures: {
        wall: r.wall,
        ...r.cpu,
        perDeliveryUs: perDeliveryUs(r.cpu, runDeliveries),
        gcPerDeliveryUs: perDeliveryUs(gc, runDeliveries),
        load: loadavg()[0],
      },
    };
  };
  for (let i = 0; i < runs; i++) {
    const r = await throughputRun(`bench-raw-${i}`, () => raw.throughput(messages));
    rawRuns.push(r.result);
    cpu.raw.push(r.figures);
    const p = await throughputRun(`bench-parley-${i}`, () => parley.throughput(messages));
    parleyRuns.push(p.result);
    cpu.parley.push(p.figures);
    progress(
      `run ${i + 1}/${runs}: raw ${r.result}/s, parley ${p.result}/s (cpu s ${JSON.stringify(p.cpu)}; µs per delivery: cpu ${JSON.stringify(p.figures.perDeliveryUs)}, gc ${JSON.stringify(p.figures.gcPerDeliveryUs)}; raw cpu ${JSON.stringify(r.figures.perDeliveryUs)}, gc ${JSON.stringify(r.figures.gcPerDeliveryUs)})`,
    );
  }
  const capacity = median(parleyRuns);
  const rawCapacity = median(rawRuns);
  // Latency below saturation: at fractions of Parley's measured capacity (room messages per second).
  const latencyByLoad = [];
  for (const loadFraction of loads) {
    const ratePerSec = Math.max(1, Math.round((capacity * loadFraction) / shape.membersPerRoom));
    const pct = Math.round(loadFraction * 100);
    progress(`latency at ${pct}% of capacity: ${ratePerSec} room messages/s`);
    // CPU is measured over the warm-up too.
    const deliveries =
      Math.round(ratePerSec * (shape.warmupSeconds + shape.latencySeconds)) * shape.membersPerRoom;
    // Each Node process's event-loop delay over the run: how long a message that reached its socket
    // waits for the process to read it (the services' window starts at this read).
    await servicesLoopDelay(backbone.metricsUrl);
    const p = await cpuDuring(backbone.pids, () =>
      profiled(profileDir, `bench-parley-at-${pct}`, () =>
        loopDelayDuring(() => parley.latency(ratePerSec, shape.latencySeconds, latencyOptions)),
      ),
    );
    const servicesDelay = await servicesLoopDelay(backbone.metricsUrl);
    const r = await cpuDuring(backbone.pids, () =>
      profiled(profileDir, `bench-raw-at-${pct}`, () =>
        loopDelayDuring(() => raw.latency(ratePerSec, shape.latencySeconds, latencyOptions)),
      ),
    );
    progress(`at ${pct}%: cores busy Parley ${coresBusy(p)}, raw ${coresBusy(r)} of ${cpus().length}`);
    if (args.series) {
      progress(`parley at ${pct}%, seconds:p50/max ms: ${p.result.result.series}`);
      progress(`raw at ${pct}%, seconds:p50/max ms: ${r.result.result.series}`);
    }
    latencyByLoad.push({
      loadFraction,
      ratePerSec,
      seconds: shape.latencySeconds,
      warmupSeconds: shape.warmupSeconds,
      parley: { ...p.result.result.endToEnd, stages: p.result.result.stages },
      raw: r.result.result.endToEnd,
      // At the same rate, so per-delivery work compares without the machine's load in it.
      cpuPerDeliveryUs: { parley: perDeliveryUs(p.cpu, deliveries), raw: perDeliveryUs(r.cpu, deliveries) },
      // How much of the machine the three processes kept busy at this rate (of `env.cpus` cores): a
      // rate that is 50% of the capacity can need most of the cores, where every process waits for one.
      coresBusy: { parley: coresBusy(p), raw: coresBusy(r) },
      eventLoopDelayMs: {
        parley: { agents: p.result.delay, services: servicesDelay },
        raw: { clients: r.result.delay },
      },
      loadAverage: loadavg()[0] ?? 0,
    });
  }
  await raw.close();
  await parley.close();
  const rss = {
    servicesPeakMb: peakRssMb(backbone.pids.services),
    natsServerPeakMb: peakRssMb(backbone.pids.natsServer),
  };
  await backbone.stop();
  const atHalf = latencyByLoad.find((l) => l.loadFraction === 0.5);

  let tracing:
    | { deliveredPerSec: number; latencyMs: { p50: number; p99: number }; spans: number }
    | undefined;
  if (args.tracing) {
    // The receiver runs in its own process, as a collector would.
    const receiver = spawn(
      process.execPath,
      ['--import', 'tsx', join(import.meta.dirname, 'otlp-receiver-process.ts')],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
        env: { ...process.env, NODE_OPTIONS: '' },
      },
    );
    const url = ((await once(receiver.stdout, 'data')) as [Buffer])[0].toString().trim();
    progress(`Parley with tracing on: 100% sampled, OTLP/HTTP protobuf to ${url}`);
    const otel = {
      OTEL_EXPORTER_OTLP_ENDPOINT: url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      OTEL_TRACES_SAMPLER: 'always_on',
    };
    backbone = await startBackbone(otel);
    const telemetry = await startTelemetry({
      config: loadTelemetryConfig(otel),
      serviceName: 'parley-bench-agents',
      log: silentLogger(),
    });
    try {
      const traced = await setupParley(parleyOptions(backbone));
      const deliveredPerSec = await traced.throughput(messages);
      const l = await traced.latency(atHalf?.ratePerSec ?? 100, shape.latencySeconds, latencyOptions);
      await traced.close();
      await telemetry.forceFlush();
      await backbone.stop();
      receiver.kill('SIGTERM');
      const last = ((await once(receiver.stdout, 'data')) as [Buffer])[0].toString();
      tracing = {
        deliveredPerSec,
        latencyMs: { p50: l.endToEnd.p50, p99: l.endToEnd.p99 },
        spans: Number(last.match(/spans (\d+)/)?.[1] ?? 0),
      };
    } finally {
      await telemetry.shutdown();
      if (receiver.exitCode === null) receiver.kill('SIGKILL');
    }
  }

  progress('A2A JSON-RPC over HTTP (@a2a-js/sdk), echo agent');
  const a2a = await benchA2a({
    payloadBytes: shape.payloadBytes,
    sequential: quick ? 500 : 2_000,
    concurrency: 64,
    seconds: quick ? 3 : 8,
  });
  let registry: Awaited<ReturnType<typeof benchRegistrySearch>> | undefined;
  if (registryAgents > 0) {
    progress(`registry search with ${registryAgents} agents`);
    registry = await benchRegistrySearch({ agents: registryAgents, progress });
  }
  const result = {
    parley: {
      deliveredPerSec: capacity,
      runs: parleyRuns,
      latencyMs: atHalf ? { p50: atHalf.parley.p50, p99: atHalf.parley.p99 } : undefined,
      cpu: cpu.parley,
    },
    raw: {
      deliveredPerSec: rawCapacity,
      runs: rawRuns,
      latencyMs: atHalf ? { p50: atHalf.raw.p50, p99: atHalf.raw.p99 } : undefined,
      cpu: cpu.raw,
    },
    a2a,
    ratios: {
      parleyOverRaw: ratio(capacity, rawCapacity),
      parleyOverA2a: ratio(capacity, a2a.perSec),
    },
    latencyByLoad,
    idle: idleCost,
    ...(tracing
      ? {
          tracing: {
            ...tracing,
            throughputCost: Math.round((1 - tracing.deliveredPerSec / capacity) * 100) / 100,
          },
        }
      : {}),
    onboarding: { agentCreateToFirstMessageMs: parley.onboardingMs },
    loadAverage: loadavg().map((x) => Math.round(x * 100) / 100),
    ...(registry
      ? {
          registry: {
            agents: registry.agents,
            searchMs: { skill: registry.skill, tag: registry.tag, text: registry.text },
            whoamiMs: registry.baselineWhoami,
          },
        }
      : {}),
    env: { natsServer, node: process.version, cpus: cpus().length, peakRssMb: rss, shape },
  };
  if (args.json) {
    process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  } else {
    const row = (name: string, perSec: number, l?: { p50: number; p99: number }) =>
      `${name.padEnd(30)} ${String(perSec).padStart(8)}/s${l ? `   p50 ${l.p50.toFixed(2).padStart(7)} ms   p99 ${l.p99.toFixed(2).padStart(7)} ms` : ''}`;
    const ms = (x: number) => x.toFixed(1).padStart(8);
    const delay = (d: LoopDelay) => `${d.p50}/${d.p99}/${d.max}`;
    const tailRow = (name: string, t: { p50: number; p99: number; p999: number; max: number }) =>
      `  ${name.padEnd(22)} p50 ${ms(t.p50)}   p99 ${ms(t.p99)}   p99.9 ${ms(t.p999)}   max ${ms(t.max)}`;
    const lines = [
      `Parley benchmark — nats-server ${natsServer}, Node ${process.version}, ${cpus().length} CPUs, load average ${result.loadAverage.join(' ')}`,
      `${shape.rooms} rooms × ${shape.membersPerRoom} members, ${shape.payloadBytes} B messages, ${messages} per throughput run, median of ${runs} interleaved runs`,
      '',
      row('raw JetStream (deliveries)', rawCapacity),
      `  runs ${rawRuns.join(', ')}`,
      row('Parley via SDK (deliveries)', capacity),
      `  runs ${parleyRuns.join(', ')}`,
      ...(tracing ? [row('Parley, tracing on (100%)', tracing.deliveredPerSec, tracing.latencyMs)] : []),
      row('A2A JSON-RPC, 64 clients', a2a.perSec, a2a.roundTripMs),
      '',
      'latency send → handler (ms), at fractions of Parley’s capacity:',
      ...latencyByLoad.flatMap((l) => [
        `${Math.round(l.loadFraction * 100)}% = ${l.ratePerSec} room msgs/s`,
        tailRow('raw', l.raw),
        tailRow('Parley', l.parley),
        ...(l.parley.stages
          ? Object.entries(l.parley.stages).map(([stage, t]) => tailRow(`  ${stage}`, t))
          : []),
        `  CPU µs per delivery: Parley ${JSON.stringify(l.cpuPerDeliveryUs.parley)}, raw ${JSON.stringify(l.cpuPerDeliveryUs.raw)} (load ${l.loadAverage.toFixed(1)})`,
        `  cores busy: Parley ${l.coresBusy.parley}, raw ${l.coresBusy.raw} of ${cpus().length}`,
        `  event-loop delay p50/p99/max ms: Parley agents ${delay(l.eventLoopDelayMs.parley.agents)}, services ${delay(l.eventLoopDelayMs.parley.services)}; raw clients ${delay(l.eventLoopDelayMs.raw.clients)}`,
      ]),
      '',
      `idle: ${idleCost.agents} connected agents ${idleCost.percentOfCore}% of one core (services + nats-server; target ≤ 2%), of which ${idleCost.nobodyConnectedPercentOfCore}% with nobody connected`,
      `Parley / raw JetStream   ${result.ratios.parleyOverRaw.toFixed(2)}×   (target ≥ 0.80)`,
      `Parley / A2A over HTTP   ${result.ratios.parleyOverA2a.toFixed(2)}×   (target ≥ 4)`,
      ...(result.tracing
        ? [
            `tracing cost            ${(result.tracing.throughputCost * 100).toFixed(0)}% of throughput, ${result.tracing.spans} spans exported   (target ≤ 15%)`,
          ]
        : []),
      `onboarding: agent create → first message handled  ${parley.onboardingMs} ms   (target ≤ 2000)`,
      ...(registry
        ? [
            `registry search, ${registry.agents} agents: skill p50 ${registry.skill.p50} ms, tag p50 ${registry.tag.p50} ms, text p50 ${registry.text.p50} ms`,
          ]
        : []),
      `peak RSS: services ${rss.servicesPeakMb ?? '?'} MB (target < 300), nats-server ${rss.natsServerPeakMb ?? '?'} MB`,
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  }
} finally {
  await backbone.stop().catch(() => undefined);
}
