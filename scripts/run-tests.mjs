// Runs the test files with node's test runner and tsx, against the sources of the workspace
// packages (the @parley/source export condition). Usage: pnpm test:run [file or directory …]
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
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

// --nodes=3: the harness runs startParley() against a 3-node JetStream cluster (PARLEY_TEST_NODES).
const nodes = process.argv
  .slice(2)
  .find((a) => a.startsWith('--nodes='))
  ?.slice('--nodes='.length);
const args2 = process.argv.slice(2).filter((a) => !a.startsWith('--nodes='));
const targets = args2.filter((a) => !a.startsWith('-'));
const passThrough = args2.filter((a) => a.startsWith('-'));
const files = (targets.length ? targets : ['contracts', 'sdk', 'services', 'bridges', 'console', 'test'])
  .map((t) => resolve(root, t))
  .flatMap((t) => collect(t, []))
  .sort();
if (files.length === 0) {
  process.stderr.write('no test files found\n');
  process.exit(1);
}
// Most tests wait on real servers rather than compute, so two per core keeps both cores busy.
const concurrency = process.env.PARLEY_TEST_CONCURRENCY ?? String(Math.max(2, availableParallelism()));
// Failures are also written as TAP, whose diagnostics name each failing test's file.
const tapFile = join(tmpdir(), `parley-tests-${process.pid}.tap`);
const run = (list, tap) =>
  spawnSync(
    process.execPath,
    [
      '--test',
      `--test-concurrency=${concurrency}`,
      '--test-timeout=300000',
      '--test-reporter=spec',
      '--test-reporter-destination=stdout',
      ...(tap ? ['--test-reporter=tap', `--test-reporter-destination=${tap}`] : []),
      ...passThrough,
      ...list.map((f) => relative(root, f)),
    ],
    {
      cwd: root,
      stdio: 'inherit',
      env: {
        ...process.env,
        NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --conditions=@parley/source --import tsx`.trim(),
        ...(nodes ? { PARLEY_TEST_NODES: nodes } : {}),
      },
    },
  );
const r = run(files, tapFile);
if (r.status === 0) process.exit(0);

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
let failed = [];
try {
  const tap = readFileSync(tapFile, 'utf8');
  failed = [...new Set([...tap.matchAll(/location: '([^']+?\.test\.ts):\d+:\d+'/g)].map((m) => m[1]))];
} catch {}
if (failed.length === 0 || !failed.every((f) => KNOWN_DEFECTS.has(f))) process.exit(r.status ?? 1);
const named = failed.map((f) => `${relative(root, f)} (${KNOWN_DEFECTS.get(f)})`).join(', ');
process.stderr.write(`\nKNOWN DEFECT: running ${named} once more\n`);
const again = run(failed);
if (again.status === 0)
  process.stderr.write(`KNOWN DEFECT: ${named} failed once, passed on the second run — not fixed\n`);
process.exit(again.status ?? 1);
