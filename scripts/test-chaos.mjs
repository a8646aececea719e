// pnpm test:chaos: the long form of the chaos test (test/chaos/main.ts, `--help` for its flags), run
// against the workspace sources like the tests; the services it starts inherit the same loader.
import { spawnSync } from 'node:child_process';
import { root } from './bootstrap.mjs';

const r = spawnSync(process.execPath, ['test/chaos/main.ts', ...process.argv.slice(2)], {
  cwd: root,
  stdio: 'inherit',
  env: {
    ...process.env,
    NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --conditions=@parley/source --import tsx`.trim(),
  },
});
process.exit(r.status ?? 1);
