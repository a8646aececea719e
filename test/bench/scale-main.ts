/**
 * `pnpm bench:scale`: the cost curve of 100 → 1,000 → 10,000 registered agents (see scale.ts for
 * what each tier measures). Progress goes to stderr; the table (or `--json`) to stdout; `--out`
 * also writes the JSON to a file, which `pnpm bench:scale:chart` turns into the chart in docs/.
 */
import { writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import type { ScaleResult } from './scale.js';
import { progress } from './stats.js';

const usage = `pnpm bench:scale [options]

  --agents <n>        registered agents at the end (tiers 100, 1000, … up to n)   default 10000
  --rooms <n>         rooms at the end, 2–8 members each, in proportion per tier  default 5000
  --connect <list>    agents connected at once at each tier, comma-separated      default 100,1000,3000
  --cluster           on the 3-node JetStream cluster (default: standalone backbone)
  --workers <n>       processes holding the connected agents                      default 4
  --idle-seconds <s>  length of each idle measurement                             default 10
  --rate-seconds <s>  length of the fixed-rate phase                              default 10
  --burst <n>         room messages in each capacity burst                        default 3000
  --fraction <f>      fixed rate as a fraction of the first tier's capacity       default 0.25
  --json              print the result as JSON
  --out <file>        also write the JSON to <file>
  --help              this text
`;

const number = (name: string, value: string | undefined, fallback: number) => {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) {
    process.stderr.write(`--${name} must be a positive number, not “${value}”\n\n${usage}`);
    process.exit(2);
  }
  return n;
};

let parsed: ReturnType<typeof parse>;
function parse() {
  return parseArgs({
    options: {
      agents: { type: 'string' },
      rooms: { type: 'string' },
      connect: { type: 'string' },
      cluster: { type: 'boolean', default: false },
      workers: { type: 'string' },
      'idle-seconds': { type: 'string' },
      'rate-seconds': { type: 'string' },
      burst: { type: 'string' },
      fraction: { type: 'string' },
      json: { type: 'boolean', default: false },
      out: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
  });
}
try {
  parsed = parse();
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n\n${usage}`);
  process.exit(2);
}
const args = parsed.values;
if (args.help) {
  process.stdout.write(usage);
  process.exit(0);
}
const connectList = (args.connect ?? '100,1000,3000').split(',').map((x) => number('connect', x.trim(), 0));
const agents = number('agents', args.agents, 10_000);
// Loaded after the flags were read: --help and a bad flag answer at once.
const { runScale } = await import('./scale.js');
const result = await runScale({
  agents,
  rooms: number('rooms', args.rooms, Math.round(agents / 2)),
  connect: connectList,
  cluster: args.cluster ?? false,
  workers: number('workers', args.workers, 4),
  idleSeconds: number('idle-seconds', args['idle-seconds'], 10),
  rateSeconds: number('rate-seconds', args['rate-seconds'], 10),
  burstMessages: number('burst', args.burst, 3_000),
  fraction: number('fraction', args.fraction, 0.25),
  consumerSamples: 20,
  progress,
  // The file holds every tier measured so far: a run stopped at 10,000 agents keeps 100 and 1,000.
  onStep: (partial) => (args.out ? writeFile(args.out, `${JSON.stringify(partial, null, 2)}\n`) : undefined),
});
const json = `${JSON.stringify(result, null, 2)}\n`;
if (args.out) await writeFile(args.out, json);
process.stdout.write(args.json ? json : table(result));

/** The result as a table, one column per tier. */
function table(r: ScaleResult): string {
  const cols = r.steps;
  const row = (name: string, f: (s: (typeof cols)[number]) => string | number) =>
    `${name.padEnd(44)}${cols.map((s) => ` ${String(f(s)).padStart(19)}`).join('')}`;
  const p = (x: { p50: number; p99: number }) => `${x.p50}/${x.p99}`;
  return `${[
    `Parley scale — ${r.topology}, nats-server ${r.env.natsServer}, Node ${r.env.node}, ${r.env.cpus} CPUs; load average ${r.loadAverage.start.join(' ')} → ${r.loadAverage.end.join(' ')}; ${r.seconds} s`,
    '',
    row('registered agents', (s) => s.registeredAgents),
    row('rooms', (s) => s.rooms),
    row('inbox consumers', (s) => s.inboxConsumers),
    row('agent create ms p50/p99', (s) => p(s.register.ms)),
    row('agent create /s', (s) => s.register.perSec),
    row('room create ms p50/p99', (s) => p(s.roomCreate.ms)),
    row('inbox consumer create ms p50/p99', (s) => p(s.inboxConsumerCreateMs)),
    row('idle, none connected: nats CPU %', (s) => s.idleRegistered.natsCpuPercent),
    row('idle, none connected: services CPU %', (s) => s.idleRegistered.servicesCpuPercent),
    row('idle, none connected: nats RSS MB', (s) => s.idleRegistered.natsRssMb),
    row('idle, none connected: load average', (s) => s.idleRegistered.loadAverage.join(' ')),
    row('connected agents', (s) => s.connected),
    row('connect ms p50/p99', (s) => p(s.connectMs)),
    row('inbox attach ms p50/p99', (s) => p(s.attachMs)),
    row('connect all, s', (s) => s.connectAllSeconds),
    row('idle, connected: nats CPU %', (s) => s.idleConnected.natsCpuPercent),
    row('idle, connected: services CPU %', (s) => s.idleConnected.servicesCpuPercent),
    row('idle, connected: nats RSS MB', (s) => s.idleConnected.natsRssMb),
    row('idle, connected: load average', (s) => s.idleConnected.loadAverage.join(' ')),
    row('idle: nats KB per connected agent', (s) => s.idleConnected.natsKbPerConnectedAgent),
    row('idle: CPU % per connected agent', (s) => s.idleConnected.cpuPercentPerConnectedAgent),
    row('services RSS MB', (s) => s.idleConnected.servicesRssMb),
    row('rooms sent in', (s) => s.activeRooms),
    row('burst deliveries/s', (s) => s.burst.deliveriesPerSec),
    row('fixed rate, room messages/s', (s) => s.fixedRate.roomMessagesPerSec),
    row('fixed rate deliveries/s', (s) => s.fixedRate.deliveriesPerSec),
    row('delivered / expected', (s) => `${s.fixedRate.delivered}/${s.fixedRate.expectedDeliveries}`),
    row('send→handler ms p50/p99', (s) => p(s.fixedRate.latencyMs)),
    row('CPU µs per delivery: nats', (s) => s.fixedRate.cpuUsPerDelivery.nats),
    row('CPU µs per delivery: services', (s) => s.fixedRate.cpuUsPerDelivery.services),
    row('fixed rate: load average', (s) => s.fixedRate.loadAverage.join(' ')),
    row('send failures', (s) => s.sendFailures.length),
    row('connect failures', (s) => s.connectFailures.length),
    row('connects tried again (UNAVAILABLE)', (s) => s.connectRetries + s.roomCreate.connectRetries),
  ].join('\n')}\n`;
}
