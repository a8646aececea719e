// Builds the console (vite) when console/dist is missing or older than its sources, so the gateway
// has something to serve at /. Plain Node: the bootstrap and the browser tests call it.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const consoleRoot = join(dirname(fileURLToPath(import.meta.url)), '..');

function newest(path) {
  const st = statSync(path);
  if (!st.isDirectory()) return st.mtimeMs;
  let t = st.mtimeMs;
  for (const e of readdirSync(path)) t = Math.max(t, newest(join(path, e)));
  return t;
}

/** True when dist/index.html is missing or older than src/, index.html or the Vite config. */
export function consoleStale() {
  const built = join(consoleRoot, 'dist', 'index.html');
  if (!existsSync(built)) return true;
  const sources = ['src', 'index.html', 'vite.config.ts', 'package.json'].map((p) => join(consoleRoot, p));
  return Math.max(...sources.filter(existsSync).map(newest)) > statSync(built).mtimeMs;
}

/** Builds when stale; returns whether it built. Throws when the build fails. */
export function ensureConsoleBuilt({ quiet = false } = {}) {
  if (!consoleStale()) return false;
  const vite = join(consoleRoot, 'node_modules', '.bin', 'vite');
  const r = spawnSync(vite, ['build', '--logLevel', quiet ? 'error' : 'warn'], {
    cwd: consoleRoot,
    stdio: 'inherit',
  });
  if (r.status !== 0) throw new Error(`console build failed (${vite} build exited ${r.status ?? r.error})`);
  return true;
}

if (process.argv[1] === fileURLToPath(import.meta.url) && consoleStale()) {
  if (process.env.PARLEY_BOOTSTRAP_QUIET !== '1') process.stderr.write('[bootstrap] building the console\n');
  ensureConsoleBuilt();
}
