// npm start: bootstrap, build, then the local backbone (flags after `--` go to it: npm start -- --help).
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BootstrapError, bootstrap, pnpmOrExit, root, runOrExit } from './bootstrap.mjs';

/**
 * When the command began, for the banner's "since npm start": npm's own process when npm runs this
 * script (it started before us: Linux's /proc says when), else this process.
 */
function commandStartedAt() {
  const own = Date.now() - process.uptime() * 1000;
  if (process.env.npm_lifecycle_event !== 'start') return own;
  try {
    const btime = Number(/^btime (\d+)$/m.exec(readFileSync('/proc/stat', 'utf8'))?.[1]);
    const stat = (pid) => readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    // npm → sh -c "node --max-semi-space-size=32 scripts/start.mjs" → this process; fields after ") ": [1] ppid, [19] starttime.
    const shell = stat(process.ppid);
    const npm = Number(shell[1]);
    const ticks = Number(stat(npm)[19]);
    // USER_HZ is 100 on every Linux Node runs on.
    const at = btime * 1000 + (ticks / 100) * 1000;
    return Number.isFinite(at) && at <= own ? at : own;
  } catch {
    return own;
  }
}

const startedAt = commandStartedAt();
let tools;
try {
  tools = bootstrap();
} catch (err) {
  process.stderr.write(`\n${err instanceof BootstrapError ? err.message : err.stack}\n`);
  process.exit(1);
}
// tsc -b directly: `pnpm run build` would spend ~0.4 s starting pnpm to run the same command.
const tsc = join(root, 'node_modules', '.bin', 'tsc');
if (existsSync(tsc)) runOrExit(tsc, ['-b']);
else pnpmOrExit(tools.pnpm, ['run', '--silent', 'build']);
process.env.NATS_SERVER_BIN ??= tools.natsServer;
process.env.PARLEY_STARTED_AT_MS = String(Math.round(startedAt));
// In this process, so Ctrl-C reaches the backbone directly and it shuts down in order.
await import(join(root, 'services/standalone/dist/main.js'));
