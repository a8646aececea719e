// The bootstrap of `npm start` and `npm test`: brings a fresh machine (Node 20 and nothing else) to
// where Parley runs. Plain Node with no dependencies, because it runs before anything is installed.
//   1. pnpm (the version pinned in package.json's packageManager), installed with npm if missing;
//   2. dependencies: pnpm install --frozen-lockfile, skipped when nothing it depends on changed since
//      the last one (a stamp in node_modules: the lockfile, every package.json, node_modules' state);
//   3. nats-server: NATS_SERVER_BIN, PATH, /usr/sbin …; else Debian's package with apt-get when
//      this is a Debian/Ubuntu machine and we are root (or have password-less sudo); else a precise
//      message saying what to install.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  accessSync,
  constants,
  existsSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const quiet = process.env.PARLEY_BOOTSTRAP_QUIET === '1';

function say(line) {
  if (!quiet) process.stderr.write(`[bootstrap] ${line}\n`);
}

export class BootstrapError extends Error {}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: 'inherit', cwd: root, ...opts });
  if (r.error) throw new BootstrapError(`${cmd} ${args.join(' ')} failed: ${r.error.message}`);
  return r.status ?? 1;
}

function capture(cmd, args) {
  const r = spawnSync(cmd, args, { cwd: root, encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : undefined;
}

function isExecutable(path) {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function which(name, extraDirs = []) {
  const dirs = [...(process.env.PATH ?? '').split(delimiter).filter(Boolean), ...extraDirs];
  for (const d of dirs) {
    const p = join(d, name);
    if (isExecutable(p)) return p;
  }
  return undefined;
}

function checkNode() {
  const [major, minor] = process.versions.node.split('.').map(Number);
  if (major < 20 || (major === 20 && minor < 6)) {
    throw new BootstrapError(`Node ${process.versions.node} is too old: Parley needs Node 20.6 or newer.`);
  }
}

/** The pnpm version package.json's packageManager pins. */
function pinnedPnpm() {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  return String(pkg.packageManager ?? 'pnpm@10').split('@')[1];
}

/** Returns the path of a pnpm of the pinned version, installing it when missing. */
function ensurePnpm() {
  const wanted = pinnedPnpm();
  const local = join(root, '.tools', 'node_modules', '.bin', 'pnpm');
  // `pnpm --version` costs ~0.4 s: a pnpm checked before, and unchanged since, is not asked again.
  const known = join(root, 'node_modules', '.parley-pnpm');
  const fingerprint = (p) => {
    const st = statSync(p);
    return `${p} ${st.size} ${st.mtimeMs} ${wanted}`;
  };
  for (const candidate of [which('pnpm'), isExecutable(local) ? local : undefined]) {
    if (!candidate) continue;
    if (existsSync(known) && readFileSync(known, 'utf8') === fingerprint(candidate)) return candidate;
    if (capture(candidate, ['--version']) === wanted) {
      if (existsSync(dirname(known))) writeFileSync(known, fingerprint(candidate));
      return candidate;
    }
  }
  say(`installing pnpm ${wanted} with npm`);
  if (run('npm', ['install', '--global', '--no-fund', '--no-audit', `pnpm@${wanted}`]) === 0) {
    const global = which('pnpm');
    if (global && capture(global, ['--version']) === wanted) return global;
  }
  // No permission for a global install: keep it inside the project.
  say('global install not possible; installing pnpm into .tools/');
  if (
    run('npm', [
      'install',
      '--prefix',
      join(root, '.tools'),
      '--no-fund',
      '--no-audit',
      '--no-save',
      `pnpm@${wanted}`,
    ]) !== 0
  ) {
    throw new BootstrapError(
      `could not install pnpm ${wanted} with npm; install it yourself: npm install -g pnpm@${wanted}`,
    );
  }
  return local;
}

const STAMP = join(root, 'node_modules', '.parley-install-stamp');

/** The workspace's package directories (pnpm-workspace.yaml's patterns: a dir, or dir/*). */
function workspaceDirs(dir) {
  const text = readFileSync(join(dir, 'pnpm-workspace.yaml'), 'utf8');
  const block = text.split(/^packages:\s*$/m)[1]?.split(/^\S/m)[0] ?? '';
  const dirs = [];
  for (const m of block.matchAll(/^\s*-\s*['"]?([^'"\s]+)['"]?\s*$/gm)) {
    const pattern = m[1];
    if (pattern.endsWith('/*')) {
      const base = join(dir, pattern.slice(0, -2));
      if (!existsSync(base)) continue;
      for (const e of readdirSync(base, { withFileTypes: true }))
        if (e.isDirectory() && existsSync(join(base, e.name, 'package.json'))) dirs.push(join(base, e.name));
    } else if (existsSync(join(dir, pattern, 'package.json'))) dirs.push(join(dir, pattern));
  }
  return dirs;
}

/**
 * What an install depends on: the lockfile, every package.json, pnpm's and Node's versions, and
 * the state pnpm left in node_modules (its .modules.yaml, rewritten by every install or add).
 * Undefined when node_modules is missing anywhere.
 */
export function installState(dir, pnpmVersion) {
  const modules = join(dir, 'node_modules', '.modules.yaml');
  if (!existsSync(modules)) return undefined;
  const dirs = workspaceDirs(dir);
  // A package with dependencies gets its own node_modules from pnpm; one without, none.
  const needsModules = (d) => {
    const pkg = JSON.parse(readFileSync(join(d, 'package.json'), 'utf8'));
    return ['dependencies', 'devDependencies', 'optionalDependencies'].some(
      (k) => Object.keys(pkg[k] ?? {}).length > 0,
    );
  };
  if (dirs.some((d) => needsModules(d) && !existsSync(join(d, 'node_modules')))) return undefined;
  const hash = createHash('sha256');
  hash.update(`${pnpmVersion} ${process.version}\n`);
  for (const f of [
    join(dir, 'pnpm-lock.yaml'),
    join(dir, 'package.json'),
    ...dirs.map((d) => join(d, 'package.json')),
  ]) {
    hash.update(`${f}\n`);
    hash.update(existsSync(f) ? readFileSync(f) : '');
  }
  hash.update(String(statSync(modules).mtimeMs));
  return hash.digest('hex');
}

function installDependencies(pnpm) {
  // ensurePnpm checked that this is the pinned version.
  const version = pinnedPnpm();
  const before = installState(root, version);
  if (before !== undefined && existsSync(STAMP) && readFileSync(STAMP, 'utf8').trim() === before) {
    say(
      'dependencies unchanged since the last install (pnpm-lock.yaml, package.json, node_modules): pnpm install skipped',
    );
    return;
  }
  say('installing dependencies (pnpm install --frozen-lockfile)');
  const args = ['install', '--frozen-lockfile', '--prefer-offline'];
  const env = { ...process.env, CI: 'true' };
  if (run(pnpm, [...args, '--reporter=silent'], { env }) !== 0) {
    // Run it again where the person can see why it failed.
    if (run(pnpm, args, { env }) !== 0) throw new BootstrapError('pnpm install failed (see above)');
  }
  const after = installState(root, version);
  if (after !== undefined) writeFileSync(STAMP, `${after}\n`);
}

const NATS_DIRS = ['/usr/sbin', '/usr/local/sbin', '/usr/local/bin', '/usr/bin'];

export function findNatsServer() {
  if (process.env.NATS_SERVER_BIN) {
    if (isExecutable(process.env.NATS_SERVER_BIN)) return process.env.NATS_SERVER_BIN;
    throw new BootstrapError(`NATS_SERVER_BIN=${process.env.NATS_SERVER_BIN} is not an executable file`);
  }
  return which('nats-server', NATS_DIRS);
}

function ensureNatsServer() {
  const found = findNatsServer();
  if (found) return found;
  const isDebian = existsSync('/etc/debian_version') && which('apt-get', NATS_DIRS);
  const isRoot = process.getuid?.() === 0;
  const sudo =
    !isRoot && which('sudo') && spawnSync('sudo', ['-n', 'true']).status === 0 ? ['sudo', '-n'] : undefined;
  if (isDebian && (isRoot || sudo)) {
    say("nats-server not found: installing Debian's nats-server package with apt-get");
    const pre = sudo ?? [];
    const aptEnv = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    const cmd = (args) =>
      pre.length
        ? run(pre[0], [...pre.slice(1), ...args], { env: aptEnv })
        : run(args[0], args.slice(1), { env: aptEnv });
    if (cmd(['apt-get', 'install', '-y', '-q', 'nats-server']) !== 0) {
      if (
        cmd(['apt-get', 'update', '-q']) !== 0 ||
        cmd(['apt-get', 'install', '-y', '-q', 'nats-server']) !== 0
      ) {
        throw new BootstrapError('apt-get could not install nats-server (see above)');
      }
    }
    const after = findNatsServer();
    if (after) return after;
  }
  throw new BootstrapError(
    [
      'nats-server (2.9 or newer) is required and was not found.',
      '  Debian/Ubuntu:  sudo apt-get install -y nats-server',
      '  macOS:          brew install nats-server',
      '  elsewhere:      https://github.com/nats-io/nats-server/releases (put it on PATH or set NATS_SERVER_BIN)',
    ].join('\n'),
  );
}

/**
 * The Go client's test (clients/go) builds with Debian's golang-go and nats.go in GOPATH mode: install
 * both with apt-get where nats-server would be (Debian, root or password-less sudo). Elsewhere only a
 * note: that one test then skips and says why.
 */
function ensureGoToolchain() {
  const haveGo = Boolean(which('go', ['/usr/lib/go/bin', '/usr/local/go/bin']));
  const haveNatsGo = existsSync('/usr/share/gocode/src/github.com/nats-io/nats.go');
  if (haveGo && haveNatsGo) return;
  const isDebian = existsSync('/etc/debian_version') && which('apt-get', NATS_DIRS);
  const isRoot = process.getuid?.() === 0;
  const sudo =
    !isRoot && which('sudo') && spawnSync('sudo', ['-n', 'true']).status === 0 ? ['sudo', '-n'] : undefined;
  if (!isDebian || !(isRoot || sudo)) {
    say('go or nats.go missing and not installable here: the Go client test will skip');
    return;
  }
  say("installing Debian's golang-go and golang-github-nats-io-go-nats-dev for the Go client test");
  const pre = sudo ?? [];
  const aptEnv = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const cmd = (args) =>
    pre.length
      ? run(pre[0], [...pre.slice(1), ...args], { env: aptEnv })
      : run(args[0], args.slice(1), { env: aptEnv });
  const pkgs = ['apt-get', 'install', '-y', '-q', 'golang-go', 'golang-github-nats-io-go-nats-dev'];
  if (cmd(pkgs) !== 0 && (cmd(['apt-get', 'update', '-q']) !== 0 || cmd(pkgs) !== 0)) {
    say('apt-get could not install the Go toolchain: the Go client test will skip');
  }
}

/** The console's assets (console/dist, served by the gateway at /): built when missing or stale. */
function ensureConsole() {
  const script = join(root, 'console', 'scripts', 'ensure-built.mjs');
  if (existsSync(script) && run(process.execPath, [script]) !== 0) {
    throw new BootstrapError('building the console failed (see above)');
  }
}

/** Installs a Debian package with apt-get when this is Debian/Ubuntu and we are root or have sudo -n; false otherwise. */
function aptInstall(pkg) {
  if (!existsSync('/etc/debian_version') || !which('apt-get', NATS_DIRS)) return false;
  const isRoot = process.getuid?.() === 0;
  const pre = isRoot
    ? []
    : which('sudo') && spawnSync('sudo', ['-n', 'true']).status === 0
      ? ['sudo', '-n']
      : undefined;
  if (!pre) return false;
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const cmd = (args) =>
    pre.length ? run(pre[0], [...pre.slice(1), ...args], { env }) : run(args[0], args.slice(1), { env });
  return (
    cmd(['apt-get', 'install', '-y', '-q', pkg]) === 0 ||
    (cmd(['apt-get', 'update', '-q']) === 0 && cmd(['apt-get', 'install', '-y', '-q', pkg]) === 0)
  );
}

/** Chromium for the console's browser tests: CHROMIUM_BIN, PATH, else Debian's package with apt-get. */
export function ensureChromium() {
  const find = () =>
    [process.env.CHROMIUM_BIN, which('chromium'), which('chromium-browser')].find(
      (p) => p && isExecutable(p),
    );
  const found = find();
  if (found) return found;
  say("chromium not found (the console's browser tests need it): installing Debian's chromium package");
  const after = aptInstall('chromium') ? find() : undefined;
  if (after) return after;
  throw new BootstrapError(
    'chromium is required for the console tests: sudo apt-get install -y chromium (or set CHROMIUM_BIN)',
  );
}

/** Runs every step; returns the pnpm and nats-server paths. */
export function bootstrap() {
  checkNode();
  const pnpm = ensurePnpm();
  installDependencies(pnpm);
  const natsServer = ensureNatsServer();
  ensureConsole();
  say(`nats-server: ${natsServer} (${capture(natsServer, ['--version']) ?? 'unknown version'})`);
  ensureGoToolchain();
  return { pnpm, natsServer };
}

/** Runs pnpm with arguments in the project root; exits the process on failure. */
export function pnpmOrExit(pnpm, args, env = {}) {
  runOrExit(pnpm, args, env);
}

/** Runs a command with arguments in the project root; exits the process on failure. */
export function runOrExit(cmd, args, env = {}) {
  const status = run(cmd, args, { env: { ...process.env, ...env } });
  if (status !== 0) process.exit(status);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    bootstrap();
  } catch (err) {
    process.stderr.write(`\n${err instanceof BootstrapError ? err.message : err.stack}\n`);
    process.exit(1);
  }
}
