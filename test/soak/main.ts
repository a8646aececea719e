/**
 * `pnpm soak`: steady traffic at 50% of Parley's measured capacity on the standalone backbone, with
 * agents connecting and disconnecting and rooms created and closed, for `--minutes` (60). Prints a
 * table over time (one row a minute: deliveries/s, send→handler p50/p99/max, late deliveries, RSS
 * of nats-server, the services process and the agents' process, nats-server's settled memory, the
 * run-queue wait) and exits 1 when a process grew more than 10% after warm-up, a delivery was later than 1 s, or an accepted message was not
 * handled once by every member in room order. Progress goes to stderr; the table (or `--json`,
 * the whole time series) to stdout.
 */
import { parseArgs } from 'node:util';
import { formatSoak, runSoak } from './soak.js';

const usage = `Usage: pnpm soak [--minutes <n>] [--rate <room messages/s>] [--json] [--help]

  --minutes <n>   length of the run, warm-up included (default 60; warm-up is a sixth, 30 s to 10 min)
  --rate <n>      room messages per second (each delivered to every member of its room);
                  default: 50% of the capacity a short probe measures on the same backbone
  --json          print the result with its time series as JSON instead of the table
  --help          this text

Fails (exit 1) when any process's memory grows more than 10% after warm-up (median of the first
post-warm-up window against the median of the last; RSS for the Node processes, for nats-server its
settled memory: RSS minus the freed heap the Go runtime keeps, right after a GC forced through its
profiling port every 30 s), when a delivery after warm-up is later than 1 s, or when an accepted
message is not handled exactly once by every member, in room order. The lateness line says how many
late deliveries came while the processes waited for a CPU at least as long as they ran, and what
share of the late time was run-queue wait.`;

let args: { minutes?: string; rate?: string; json?: boolean; help?: boolean };
try {
  args = parseArgs({
    options: {
      minutes: { type: 'string' },
      rate: { type: 'string' },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  }).values;
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n\n${usage}\n`);
  process.exit(2);
}
if (args.help) {
  process.stdout.write(`${usage}\n`);
  process.exit(0);
}
const positive = (name: string, v: string | undefined) => {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) {
    process.stderr.write(`--${name} must be a positive number, not “${v}”\n\n${usage}\n`);
    process.exit(2);
  }
  return n;
};
const minutes = positive('minutes', args.minutes) ?? 60;
const rate = positive('rate', args.rate);

const result = await runSoak({
  minutes,
  ...(rate ? { rate } : {}),
  log: (line) => process.stderr.write(`[soak] ${line}\n`),
}).catch((err: unknown) => {
  // The run could not be set up (too short, the backbone did not start): no figures to print.
  process.stderr.write(`soak: ${(err as Error).message}\n`);
  process.exit(2);
});
process.stdout.write(`${args.json ? JSON.stringify(result, null, 2) : formatSoak(result)}\n`);
process.exit(result.failures.length ? 1 : 0);
