// Runs the test files with node's test runner and tsx, against the sources of the workspace
// packages (the @parley/source export condition). Usage: pnpm test:run [file or directory …]
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
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
const args = [
  '--test',
  `--test-concurrency=${concurrency}`,
  '--test-timeout=300000',
  '--test-reporter=spec',
  ...passThrough,
  ...files.map((f) => relative(root, f)),
];
const r = spawnSync(process.execPath, args, {
  cwd: root,
  stdio: 'inherit',
  env: {
    ...process.env,
    NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --conditions=@parley/source --import tsx`.trim(),
    ...(nodes ? { PARLEY_TEST_NODES: nodes } : {}),
  },
});
process.exit(r.status ?? 1);
