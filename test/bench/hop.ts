/**
 * `pnpm bench:hop`: what one request/reply hop in front of the room write costs raw JetStream — the
 * hop Parley's ingress adds (an agent's send is a request to the ingress, which writes the room log
 * and answers), without any of the ingress's checks. Raw and raw-with-a-relay run interleaved on
 * one nats-server of their own; throughput is the median of the runs, and the ratio between them is
 * the highest Parley's throughput against raw could be with an ingress in the path that cost nothing
 * itself. `--shards`, `--payload-bytes`, `--parley-headers` and `--permissions` give the second
 * pipeline Parley's other differences from raw on the server (16 inbox streams; its message
 * envelope, 874 bytes for the bench's 512; its headers; members whose users have permissions) to
 * measure them the same way. `PARLEY_BENCH_KEEP=1` keeps the server's directory (its log).
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { connect } from '@nats-io/transport-node';
import { coalesceWrites } from '@parley/contracts';
import { findNatsServer, freePort, startNatsServer } from '@parley/nats-server';
import { usageError, wholeNumber } from './cli.js';
import { memberNames, setupRaw } from './raw.js';
import { cpuDuring, median, perDeliveryUs, progress } from './stats.js';

const usage = `pnpm bench:hop [options]

  Raw JetStream against raw JetStream with a request/reply relay in front of the room write (the
  hop Parley's ingress adds, without its checks), interleaved on one nats-server of their own.

  --messages <n>       room messages per run                            default 20000
  --runs <n>           interleaved runs of each                         default 3
  --no-relay           the second pipeline writes the room stream itself
  --shards <n>         the second pipeline's inbox streams              default 1
  --payload-bytes <n>  the second pipeline's message size               default 512
  --parley-headers     the second pipeline's entries carry headers of Parley's sizes
  --permissions        the second pipeline's members connect as users with permissions shaped
                       like a Parley participant's (5 publish subjects, 1 subscribe)
  --json               print the result as JSON (progress still goes to stderr)
  --help               this text
`;
function parse() {
  return parseArgs({
    allowNegative: true,
    options: {
      messages: { type: 'string' },
      runs: { type: 'string' },
      relay: { type: 'boolean', default: true },
      shards: { type: 'string' },
      'payload-bytes': { type: 'string' },
      'parley-headers': { type: 'boolean', default: false },
      permissions: { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
}
let args: ReturnType<typeof parse>['values'];
try {
  args = parse().values;
} catch (err) {
  usageError((err as Error).message, usage);
}
if (args.help) {
  process.stdout.write(usage);
  process.exit(0);
}
const count = (name: string, value: string | undefined, fallback: number) =>
  wholeNumber(usage, name, value, fallback, 1);
const messages = count('messages', args.messages, 20_000);
const runs = count('runs', args.runs, 3);
const second = {
  relay: args.relay ?? true,
  inboxStreams: count('shards', args.shards, 1),
  payloadBytes: count('payload-bytes', args['payload-bytes'], 512),
  parleyHeaders: args['parley-headers'] ?? false,
  permissions: args.permissions ?? false,
};

const bin = await findNatsServer();
if (!bin) {
  process.stderr.write(
    'nats-server not found: install it (apt-get install nats-server) or set NATS_SERVER_BIN\n',
  );
  process.exit(1);
}
const shape = { rooms: 100, membersPerRoom: 3, payloadBytes: 512, partitions: 16, batch: 100, window: 256 };
/** Users for the second pipeline's members and the admin user everything else uses. */
function usersConfig(): string {
  const q = JSON.stringify;
  const members = memberNames(shape.rooms, shape.membersPerRoom).flat();
  // Shaped like Parley's participant template: its own requests, its consumer's info, acks and flow
  // control replies by consumer name; subscriptions under one reply prefix.
  const user = (m: string) =>
    `    { user: ${q(`hop-${m}`)}, password: "p", permissions: { publish: { allow: [${[
      'hop.send.*',
      'hop.room.>',
      `$JS.API.CONSUMER.INFO.*.${m}`,
      `$JS.ACK.*.${m}.>`,
      `$JS.FC.*.${m}.>`,
    ]
      .map((x) => q(x))
      .join(', ')}] }, subscribe: { allow: ["_INBOX.hop.>"] } } }`;
  return [
    'authorization {',
    '  timeout: 10',
    '  users = [',
    '    { user: "admin", password: "a" }',
    ...members.map(user),
    '  ]',
    '}',
  ].join('\n');
}
const dir = await mkdtemp(join(tmpdir(), 'parley-hop-'));
const server = await startNatsServer({
  bin,
  configPath: join(dir, 'nats.conf'),
  logPath: join(dir, 'nats.log'),
  config: {
    serverName: 'hop',
    host: '127.0.0.1',
    port: await freePort(),
    storeDir: join(dir, 'js'),
    ...(second.permissions ? { extra: usersConfig() } : {}),
  },
});
const pids = { bench: process.pid, natsServer: server.pid };
try {
  const auth = second.permissions ? { user: 'admin', pass: 'a' } : {};
  const connectOne = async () => {
    const nc = await connect({ servers: server.url, noAsyncTraces: true, ...auth });
    coalesceWrites(nc);
    return nc;
  };
  const memberConnect = async (m: string) => {
    const nc = await connect({
      servers: server.url,
      noAsyncTraces: true,
      user: `hop-${m}`,
      pass: 'p',
      inboxPrefix: '_INBOX.hop',
    });
    coalesceWrites(nc);
    return nc;
  };
  const options = { ...shape, connect: connectOne, fanoutConnections: 2 };
  const described = `${second.relay ? 'a relay' : 'no relay'}, ${second.inboxStreams} inbox stream(s), ${second.payloadBytes} B${second.parleyHeaders ? ", Parley's headers" : ''}${second.permissions ? ', members with permissions' : ''}`;
  progress(`hop: setting up raw and raw with ${described} (600 connections, 600 inbox consumers)`);
  const raw = await setupRaw({ ...options, name: 'bench' });
  const { permissions, ...onServer } = second;
  const relayed = await setupRaw({
    ...options,
    ...onServer,
    name: 'hop',
    ...(permissions ? { memberConnect } : {}),
  });
  const deliveries = messages * shape.membersPerRoom;
  const result = {
    rawRuns: [] as number[],
    relayedRuns: [] as number[],
    cpuUs: { raw: [] as unknown[], relayed: [] as unknown[] },
  };
  for (let i = 0; i < runs; i++) {
    const r = await cpuDuring(pids, () => raw.throughput(messages));
    result.rawRuns.push(r.result);
    result.cpuUs.raw.push(perDeliveryUs(r.cpu, deliveries));
    const h = await cpuDuring(pids, () => relayed.throughput(messages));
    result.relayedRuns.push(h.result);
    result.cpuUs.relayed.push(perDeliveryUs(h.cpu, deliveries));
    progress(`hop: run ${i + 1}: raw ${r.result}, with ${described} ${h.result} deliveries/s`);
  }
  await relayed.close();
  await raw.close();
  const summary = {
    messages,
    runs,
    second,
    raw: median(result.rawRuns),
    relayed: median(result.relayedRuns),
    ratio: Math.round((median(result.relayedRuns) / median(result.rawRuns)) * 100) / 100,
    ...result,
    natsServer: execFileSync(bin, ['--version']).toString().trim(),
  };
  if (args.json) process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
  else
    process.stdout.write(
      `raw ${summary.raw} deliveries/s, with ${described} ${summary.relayed} (${summary.ratio}×); runs: raw ${result.rawRuns.join(' / ')}, relayed ${result.relayedRuns.join(' / ')}\n`,
    );
} finally {
  await server.stop();
  if (!process.env.PARLEY_BENCH_KEEP) await rm(dir, { recursive: true, force: true });
  else progress(`kept ${dir}`);
}
