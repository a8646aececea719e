/**
 * `pnpm bench`: Parley's message path against raw JetStream doing the same work on the same
 * nats-server, and against A2A JSON-RPC over HTTP, in one run; plus onboarding time and registry
 * search at 10,000 agents. Progress goes to stderr; the table (or `--json`) to stdout.
 *
 * Flags: --json, --messages <n> (room messages per throughput run, default 20000),
 * --registry-agents <n> (default 10000; 0 skips), --quick (small sizes, for a smoke run).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { cpus, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { credsAuthenticator, connect as natsConnect } from '@nats-io/transport-node';
import { KeyMaterial, mintServiceCreds } from '@parley/governance';
import { freePort } from '@parley/standalone';
import { benchA2a } from './a2a.js';
import { benchParley } from './parley.js';
import { benchRaw } from './raw.js';
import { benchRegistrySearch } from './registry.js';
import { childPids, cpuDuring, peakRssMb, profiled, progress } from './stats.js';

const { values: args } = parseArgs({
  options: {
    json: { type: 'boolean', default: false },
    quick: { type: 'boolean', default: false },
    messages: { type: 'string' },
    'registry-agents': { type: 'string' },
  },
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

async function startBackbone(home: string) {
  const natsPort = await freePort();
  const httpPort = await freePort();
  const child: ChildProcess = spawn(
    process.execPath,
    [
      // PARLEY_BENCH_PROFILE=<dir> writes a CPU profile of the services' process there.
      ...(process.env.PARLEY_BENCH_PROFILE
        ? ['--cpu-prof', `--cpu-prof-dir=${process.env.PARLEY_BENCH_PROFILE}`]
        : []),
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
      env: { ...process.env, LOG_LEVEL: 'warn', NODE_OPTIONS: '' },
    },
  );
  let out = '';
  // The services' warnings (fan-out restarts, lease changes) explain stalls: keep them.
  const log = createWriteStream(join(home, 'services.log'));
  child.stderr?.pipe(log);
  await new Promise<void>((ok, fail) => {
    const on = (d: Buffer) => {
      out += d;
      if (out.includes('Parley is running')) ok();
    };
    child.stdout?.on('data', on);
    child.stderr?.on('data', on);
    child.once('exit', (code) => fail(new Error(`backbone exited (${code}):\n${out}`)));
  });
  return { child, natsUrl: `nats://127.0.0.1:${natsPort}` };
}

const home = await mkdtemp(join(tmpdir(), 'parley-bench-'));
progress(`starting the backbone (services/standalone/dist) in ${home}`);
const backbone = await startBackbone(home);
const keys = KeyMaterial.parse(JSON.parse(await readFile(join(home, 'keys.json'), 'utf8')));
const serviceCreds = new TextEncoder().encode((await mintServiceCreds(keys, 'bench')).creds);
const connectRaw = () =>
  natsConnect({
    servers: backbone.natsUrl,
    authenticator: credsAuthenticator(serviceCreds),
    noAsyncTraces: true,
  });
const probe = await connectRaw();
const natsServer = probe.info?.version ?? 'unknown';
await probe.close();

try {
  progress(
    `raw JetStream: ${shape.rooms} rooms × ${shape.membersPerRoom} members, ${messages} messages of ${shape.payloadBytes} B`,
  );
  const pids = {
    bench: process.pid,
    services: backbone.child.pid,
    natsServer: childPids(backbone.child.pid ?? 0)[0],
  };
  const rawRun = await cpuDuring(pids, () =>
    benchRaw({ connect: connectRaw, ...shape, partitions: 16, batch: 100, window: 256 }),
  );
  const raw = rawRun.result;
  progress(`raw: cpu seconds ${JSON.stringify(rawRun.cpu)} in ${rawRun.wall} s`);
  progress('Parley through the SDK: the same shape');
  const parley = await benchParley({
    natsUrl: backbone.natsUrl,
    adminCreds: join(home, 'creds', 'admin.creds'),
    ...shape,
    window: 256,
    // Only the measured phases: registering 300 agents is not the message path.
    measure: async (fn) => {
      const run = await cpuDuring(pids, () => profiled(process.env.PARLEY_BENCH_PROFILE, 'bench-parley', fn));
      progress(`parley: cpu seconds ${JSON.stringify(run.cpu)} in ${run.wall} s`);
      return run.result;
    },
  });
  const natsPid = childPids(backbone.child.pid ?? 0)[0];
  const rss = { servicesPeakMb: peakRssMb(backbone.child.pid), natsServerPeakMb: peakRssMb(natsPid) };
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
    parley: { deliveredPerSec: parley.deliveredPerSec, latencyMs: parley.latencyMs },
    raw,
    a2a,
    ratios: {
      parleyOverRaw: Math.round((parley.deliveredPerSec / raw.deliveredPerSec) * 100) / 100,
      parleyOverA2a: Math.round((parley.deliveredPerSec / a2a.perSec) * 100) / 100,
    },
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
      `${name.padEnd(28)} ${String(perSec).padStart(8)}/s   p50 ${l.p50.toFixed(2).padStart(6)} ms   ${l.p95 !== undefined ? `p95 ${l.p95.toFixed(2).padStart(6)} ms   ` : ''.padEnd(16)}p99 ${l.p99.toFixed(2).padStart(6)} ms`;
    const lines = [
      `Parley benchmark — nats-server ${natsServer}, Node ${process.version}, ${cpus().length} CPUs`,
      `${shape.rooms} rooms × ${shape.membersPerRoom} members, ${shape.payloadBytes} B messages; latency at ${shape.latencyRate} msg/s`,
      '',
      row('raw JetStream (deliveries)', raw.deliveredPerSec, raw.latencyMs),
      row('Parley via SDK (deliveries)', parley.deliveredPerSec, parley.latencyMs),
      row('A2A JSON-RPC, 64 clients', a2a.perSec, a2a.roundTripMs),
      '',
      `Parley / raw JetStream   ${result.ratios.parleyOverRaw.toFixed(2)}×   (target ≥ 0.80)`,
      `Parley / A2A over HTTP   ${result.ratios.parleyOverA2a.toFixed(2)}×   (target ≥ 4)`,
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
  backbone.child.kill('SIGTERM');
  await new Promise((r) => backbone.child.once('exit', r));
  if (process.env.PARLEY_BENCH_KEEP) progress(`kept ${home}`);
  else await rm(home, { recursive: true, force: true });
}
