/**
 * `pnpm test:chaos`: the long form of the chaos test (see chaos.ts) — kill -9 of a random node every
 * 20 s for `--minutes`, with partitions, pauses and rooms replica restarts between the kills; prints
 * the table of faults and resume times, writes `--json`, and exits 1 when an invariant broke.
 */
import { writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { CHAOS_BOUND_MS, commit, formatReport, runChaos } from './chaos.js';

const HELP = `pnpm test:chaos [options]

Chaos on a 3-node JetStream cluster under paced traffic: kill -9 of a random nats-server node every
20 s (restarted at once), partitions of one node's routes, SIGSTOP pauses, and restarts of every
rooms replica in turn. Fails (exit 1) when an accepted message is lost, doubled or reordered, when
delivery does not resume within the bound after a fault, or when a fan-out lease has two holders.

  --minutes <n>       minutes of kills, one every 20 s (default 3)
  --partitions <n>    partitions of one node (default 2), each --fault-ms long
  --pauses <n>        SIGSTOP pauses of one node (default 2), each --fault-ms long
  --replica-rounds <n> rounds of restarting every rooms replica (default 2)
  --fault-ms <ms>     how long a partition or pause lasts (default 12000)
  --bound-ms <ms>     resume bound, from when JetStream has leaders again (default ${CHAOS_BOUND_MS})
  --jetstream-back-ms <ms> how long nats-server may take to have those leaders (default 120000)
  --rate <n>          messages per second per room (3 rooms; default 5)
  --seed <n>          seed of the node choices (printed by every run)
  --json <file>       write the report as JSON
  --keep-logs <dir>   copy the nats-server logs and stores and the replicas' output (info level) there
  --help              this text
`;

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '3' },
    partitions: { type: 'string', default: '2' },
    pauses: { type: 'string', default: '2' },
    'replica-rounds': { type: 'string', default: '2' },
    'fault-ms': { type: 'string', default: '12000' },
    'bound-ms': { type: 'string', default: String(CHAOS_BOUND_MS) },
    'jetstream-back-ms': { type: 'string', default: '120000' },
    rate: { type: 'string', default: '5' },
    seed: { type: 'string' },
    json: { type: 'string' },
    'keep-logs': { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  process.stdout.write(HELP);
  process.exit(0);
}
const num = (name: string, v: string | undefined) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) {
    process.stderr.write(`--${name} must be a non-negative number, got ${v}\n${HELP}`);
    process.exit(2);
  }
  return n;
};
const killEveryMs = 20_000;
const minutes = num('minutes', values.minutes);
const faultMs = num('fault-ms', values['fault-ms']);
const report = await runChaos({
  kills: Math.round((minutes * 60_000) / killEveryMs),
  killEveryMs,
  partitions: num('partitions', values.partitions),
  partitionMs: faultMs,
  pauses: num('pauses', values.pauses),
  pauseMs: faultMs,
  replicaRounds: num('replica-rounds', values['replica-rounds']),
  boundMs: num('bound-ms', values['bound-ms']),
  jetstreamBackMs: num('jetstream-back-ms', values['jetstream-back-ms']),
  ratePerSec: num('rate', values.rate),
  ...(values.seed !== undefined ? { seed: num('seed', values.seed) } : {}),
  log: (line) => process.stdout.write(`${line}\n`),
  ...(values['keep-logs'] ? { keepLogsIn: values['keep-logs'] } : {}),
});
process.stdout.write(`\n${formatReport(report)}\n`);
if (report.diagnostics) process.stdout.write(`\n${JSON.stringify(report.diagnostics, null, 2)}\n`);
if (values.json) {
  await writeFile(
    values.json,
    `${JSON.stringify({ commit: commit(), at: new Date().toISOString(), ...report }, null, 2)}\n`,
  );
  process.stdout.write(`wrote ${values.json}\n`);
}
process.exit(report.violations.length === 0 ? 0 : 1);
