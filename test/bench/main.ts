/**
 * `pnpm bench`: Parley's message path against raw JetStream doing the same work on the same
 * nats-server, and against A2A JSON-RPC over HTTP, in one run; the same Parley run with tracing on
 * (100% sampling, exported to a receiver in its own process); onboarding time; registry search at
 * 10,000 agents. Progress goes to stderr; the table (or `--json`) to stdout.
 *
 * Flags: --json, --messages <n> (room messages per throughput run, default 20000),
 * --registry-agents <n> (default 10000; 0 skips), --no-tracing (skip the tracing-on run),
 * --quick (small sizes, for a smoke run). PARLEY_BENCH_PROFILE=<dir> writes CPU profiles.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { cpus, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { credsAuthenticator, connect as natsConnect } from '@nats-io/transport-node';
import { KeyMaterial, mintServiceCreds } from '@parley/governance';
import { loadTelemetryConfig, silentLogger, startTelemetry } from '@parley/kit';
import { freePort } from '@parley/standalone';
import { benchA2a } from './a2a.js';
import { benchParley, type ParleyBenchResult } from './parley.js';
import { benchRaw } from './raw.js';
import { benchRegistrySearch } from './registry.js';
import { childPids, cpuDuring, peakRssMb, profiled, progress } from './stats.js';

const { values: args } = parseArgs({
  options: {
    json: { type: 'boolean', default: false },
    quick: { type: 'boolean', default: false },
    tracing: { type: 'boolean', default: true },
    messages: { type: 'string' },
    'registry-agents': { type: 'string' },
  },
  allowNegative: true,
});
const quick = args.quick ?? false;
const messages = Number(args.messages ?? (quick ? 3_000 : 20_000));
const registryAgents = Number(args['registry-agents'] ?? (quick ? 500 : 10_000));
const shape = {
  rooms: 100,
  membersPerRoom: 3,
  payloadBytes: 512,
  messages,
  latencyRate: 1_000,
  latencySeconds: quick ? 2 : 5,
};
const root = resolve(import.meta.dirname, '../..');
const profileDir = process.env.PARLEY_BENCH_PROFILE;

/** The standalone backbone, built (`dist/`), in a process of its own so its CPU and memory show. */
async function startBackbone(env: Record<string, string> = {}) {
  const home = await mkdtemp(join(tmpdir(), 'parley-bench-'));
  const natsPort = await freePort();
  const httpPort = await freePort();
  const child: ChildProcess = spawn(
    process.execPath,
    [
      ...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []),
      'services/standalone/dist/main.js',
      '--no-demo',
      '--home',
      home,
      '--nats-port',
      String(natsPort),
      '--http-port',
      String(httpPort),
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
    pids: { bench: process.pid, services: child.pid, natsServer: childPids(child.pid ?? 0)[0] },
    connect: () =>
      natsConnect({ servers: natsUrl, authenticator: credsAuthenticator(creds), noAsyncTraces: true }),
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

/** Parley through the SDK on `backbone`, CPU counted (and profiled) over the measured phases only. */
function runParley(backbone: Backbone, label: string): Promise<ParleyBenchResult> {
  return benchParley({
    natsUrl: backbone.natsUrl,
    adminCreds: backbone.adminCreds,
    ...shape,
    window: 256,
    measure: async (fn) => {
      const run = await cpuDuring(backbone.pids, () => profiled(profileDir, `bench-${label}`, fn));
      progress(`${label}: cpu seconds ${JSON.stringify(run.cpu)} in ${run.wall} s`);
      return run.result;
    },
  });
}

let backbone = await startBackbone();
const probe = await backbone.connect();
const natsServer = probe.info?.version ?? 'unknown';
await probe.close();

try {
  progress(
    `raw JetStream: ${shape.rooms} rooms × ${shape.membersPerRoom} members, ${messages} messages of ${shape.payloadBytes} B`,
  );
  const rawRun = await cpuDuring(backbone.pids, () =>
    benchRaw({ connect: backbone.connect, ...shape, partitions: 16, batch: 100, window: 256 }),
  );
  const raw = rawRun.result;
  progress(`raw: cpu seconds ${JSON.stringify(rawRun.cpu)} in ${rawRun.wall} s`);
  progress('Parley through the SDK: the same shape, tracing off');
  const parley = await runParley(backbone, 'parley');
  const rss = {
    servicesPeakMb: peakRssMb(backbone.pids.services),
    natsServerPeakMb: peakRssMb(backbone.pids.natsServer),
  };
  await backbone.stop();

  let tracing:
    | { deliveredPerSec: number; latencyMs: ParleyBenchResult['latencyMs']; spans: number }
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
      const on = await runParley(backbone, 'parley-traced');
      await telemetry.forceFlush();
      await backbone.stop();
      receiver.kill('SIGTERM');
      const last = ((await once(receiver.stdout, 'data')) as [Buffer])[0].toString();
      tracing = {
        deliveredPerSec: on.deliveredPerSec,
        latencyMs: on.latencyMs,
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
  const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
  const result = {
    parley: { deliveredPerSec: parley.deliveredPerSec, latencyMs: parley.latencyMs },
    raw,
    a2a,
    ratios: {
      parleyOverRaw: ratio(parley.deliveredPerSec, raw.deliveredPerSec),
      parleyOverA2a: ratio(parley.deliveredPerSec, a2a.perSec),
    },
    ...(tracing
      ? {
          tracing: {
            ...tracing,
            throughputCost: Math.round((1 - tracing.deliveredPerSec / parley.deliveredPerSec) * 100) / 100,
          },
        }
      : {}),
    onboarding: { agentCreateToFirstMessageMs: parley.onboardingMs },
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
    const row = (name: string, perSec: number, l: { p50: number; p95?: number; p99: number }) =>
      `${name.padEnd(30)} ${String(perSec).padStart(8)}/s   p50 ${l.p50.toFixed(2).padStart(7)} ms   ${l.p95 !== undefined ? `p95 ${l.p95.toFixed(2).padStart(7)} ms   ` : ''.padEnd(17)}p99 ${l.p99.toFixed(2).padStart(7)} ms`;
    const lines = [
      `Parley benchmark — nats-server ${natsServer}, Node ${process.version}, ${cpus().length} CPUs`,
      `${shape.rooms} rooms × ${shape.membersPerRoom} members, ${shape.payloadBytes} B messages, ${messages} per throughput run; latency at ${shape.latencyRate} msg/s`,
      '',
      row('raw JetStream (deliveries)', raw.deliveredPerSec, raw.latencyMs),
      row('Parley via SDK (deliveries)', parley.deliveredPerSec, parley.latencyMs),
      ...(tracing ? [row('Parley, tracing on (100%)', tracing.deliveredPerSec, tracing.latencyMs)] : []),
      row('A2A JSON-RPC, 64 clients', a2a.perSec, a2a.roundTripMs),
      '',
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
