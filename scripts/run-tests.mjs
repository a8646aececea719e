// Runs the test files with node's test runner and tsx, against the sources of the workspace
// packages (the @parley/source export condition).
import { readdirSync, statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { run } from 'node:test';
import { spec } from 'node:test/reporters';
import { parseArgs } from 'node:util';
import { root } from './bootstrap.mjs';

const SKIP = new Set(['node_modules', 'dist', '.git', '.parley', '.tools']);

function collect(path, out) {
  const st = statSync(path);
  if (st.isFile()) {
    if (/\.test\.ts$/.test(path)) out.push(path);
    return out;
  }
  for (const entry of readdirSync(path)) {
    if (!SKIP.has(entry)) collect(join(path, entry), out);
  }
  return out;
}

const usage =
  'usage: pnpm test:run [--nodes=1|3] [--concurrency=<files at once>] [--test-name-pattern=<regexp> …] [file or directory …]';
// --nodes=3: the harness runs startParley() against a 3-node JetStream cluster (PARLEY_TEST_NODES);
// 1, the default, against one nats-server.
let parsed;
try {
  parsed = parseArgs({
    options: {
      nodes: { type: 'string' },
      concurrency: { type: 'string' },
      'test-name-pattern': { type: 'string', multiple: true },
    },
    allowPositionals: true,
  });
} catch (err) {
  process.stderr.write(`${err.message}\n${usage}\n`);
  process.exit(2);
}
const { nodes, concurrency: concurrencyArg, 'test-name-pattern': testNamePatterns = [] } = parsed.values;
const concurrencyAsked = concurrencyArg ?? (process.env.PARLEY_TEST_CONCURRENCY || undefined);
if (concurrencyAsked !== undefined && !/^[1-9][0-9]*$/.test(concurrencyAsked)) {
  process.stderr.write(
    `--concurrency (or PARLEY_TEST_CONCURRENCY) must be a positive whole number, not “${concurrencyAsked}”\n${usage}\n`,
  );
  process.exit(2);
}
if (nodes !== undefined && nodes !== '1' && nodes !== '3') {
  process.stderr.write(`--nodes must be 1 or 3, not “${nodes}”\n${usage}\n`);
  process.exit(2);
}
const targets = parsed.positionals;
// The longest files start first, so that none of them is left running alone at the end: in one run
// of the first pass, 2 at a time, the files took 1,143 s in 611 s, 78 s of it with one file running
// (the soak test, started last by name). node --test sorts the files it is given by name; run() below
// keeps this order. Longest first, then the rest by name. The times are a clean clone's (a1fbce2, 3
// files at a time; the run's summary lists the slowest files).
const LONGEST = [
  'test/chaos/chaos.test.ts', // 101 s
  'test/bench/scale.test.ts', // 80 s
  'console/test/console.test.ts', // 69 s
  'bridges/test/crash-resume.test.ts', // 61 s
  'test/soak/soak.test.ts', // 55 s
  'test/cluster/fanout-leaderless.test.ts', // 50 s
  'services/standalone/test/restarts.test.ts', // 54 s
  'test/integration/reliability-processes.test.ts', // 53 s (73 s on the cluster)
  'test/integration/reliability.test.ts', // 35 s (82 s on the cluster)
  'test/integration/retention.test.ts', // 31 s on the cluster
  'test/integration/delivery.test.ts', // 30 s on the cluster
].map((f) => resolve(root, f));
const rank = (f) => {
  const i = LONGEST.indexOf(f);
  return i < 0 ? LONGEST.length : i;
};
const files = (targets.length ? targets : ['contracts', 'sdk', 'services', 'bridges', 'console', 'test'])
  .map((t) => resolve(root, t))
  .flatMap((t) => collect(t, []))
  .sort()
  .sort((a, b) => rank(a) - rank(b));
if (files.length === 0) {
  process.stderr.write('no test files found\n');
  process.exit(1);
}
// Most tests wait on real servers rather than compute: one file more than there are cores keeps the
// cores busy (session 26, the first pass of a clean clone on 2 cores: 628 s at 2 files at a time,
// 527 s at 3, with the cores 94.5% busy).
// `pnpm test:cluster` runs 3 at a time: its files wait on Raft elections more than they compute (one
// run each, session 25: 259 s at 3, the cores 92% busy, against 292–300 s at 2).
const concurrency = Number(concurrencyAsked ?? availableParallelism() + 1);
// Each file runs in a process of its own, which inherits this environment.
// test-linger.mjs fails a file whose process outlives its tests, naming what is still open.
process.env.NODE_OPTIONS =
  `${process.env.NODE_OPTIONS ?? ''} --conditions=@parley/source --import tsx --import ${join(root, 'scripts', 'test-linger.mjs')}`.trim();
if (nodes) process.env.PARLEY_TEST_NODES = nodes;

/** How many of the slowest files the summary after a run names. */
const SLOWEST = 10;

/**
 * Runs `list`, reporting to stdout, then names the slowest files with the wall time of each one's
 * process (start to exit: its tests, its hooks, and loading it); resolves with the files that had
 * a failing test.
 */
async function runFiles(list) {
  const failed = new Set();
  const seconds = new Map();
  const started = performance.now();
  const stream = run({
    files: list,
    concurrency,
    timeout: 300_000,
    ...(testNamePatterns.length ? { testNamePatterns } : {}),
  });
  stream.on('test:fail', (t) => {
    if (!t.todo) failed.add(t.file ?? '(unknown file)');
  });
  // A file's own process is reported as a test named after the file.
  stream.on('test:complete', (t) => {
    if (t.name === t.file) seconds.set(t.file, t.details.duration_ms / 1000);
  });
  const report = stream.compose(new spec());
  report.pipe(process.stdout, { end: false });
  await new Promise((res, rej) => report.on('end', res).on('error', rej));
  const wall = (performance.now() - started) / 1000;
  const sum = [...seconds.values()].reduce((a, b) => a + b, 0);
  const slowest = [...seconds].sort((a, b) => b[1] - a[1]).slice(0, SLOWEST);
  process.stdout.write(
    `\n${seconds.size} file${seconds.size === 1 ? '' : 's'} in ${wall.toFixed(0)} s, ${concurrency} at a time (${sum.toFixed(0)} s of file processes); the slowest:\n${slowest
      .map(([f, s]) => `  ${s.toFixed(1).padStart(6)} s  ${relative(root, f)}`)
      .join('\n')}\n`,
  );
  return [...failed];
}

const failed = await runFiles(files);
if (failed.length === 0) process.exit(0);

// KNOWN DEFECTS: open defects of the message path under faults, each named with its issue and
// described in docs/operations.md ("Known defects"). A file listed here may run once more when every
// failing file of the run is listed, and the run says so loudly; any other failure fails the run at
// once, and so does a listed file that fails twice. Remove an entry when its defect is fixed.
// - issue 21, any pass: the chaos test's short form — after a pause or a partition nats-server
//   2.9.10 loses or diverges what it had pushed (entries lost and their positions reused, a replica
//   with another history reported current, conditional writes not serialised). Fixed so far:
//   position-based inbox dedupe ids, a replica exiting at start, lost entries missed after a lost
//   election advisory, a consumer led by a diverged replica, two lease holders, a start that hung.
const KNOWN_DEFECTS = new Map(
  [
    ['test/chaos/chaos.test.ts', 'issue 21, nats-server 2.9.10 losing a stream quorum again after a fault'],
  ].map(([file, what]) => [resolve(root, file), what]),
);
if (!failed.every((f) => KNOWN_DEFECTS.has(f))) process.exit(1);
const named = failed.map((f) => `${relative(root, f)} (${KNOWN_DEFECTS.get(f)})`).join(', ');
process.stderr.write(`\nKNOWN DEFECT: running ${named} once more\n`);
const again = await runFiles(failed);
if (again.length === 0)
  process.stderr.write(`KNOWN DEFECT: ${named} failed once, passed on the second run — not fixed\n`);
process.exit(again.length === 0 ? 0 : 1);
