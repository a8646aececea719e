/**
 * Runs nats-server as a child process: finds the binary, renders its configuration, starts it, waits
 * until it is ready, stops it gracefully or kills it. Used by the standalone backbone and by the
 * test harness.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { constants, createWriteStream, mkdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { access, mkdir, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';

/** Where nats-server is looked for after `NATS_SERVER_BIN` and `PATH`. */
const EXTRA_DIRS = ['/usr/sbin', '/usr/local/sbin', '/usr/local/bin', '/usr/bin', '/opt/nats'];

/** Finds the nats-server binary, or undefined. */
export async function findNatsServer(
  env: Record<string, string | undefined> = process.env,
): Promise<string | undefined> {
  if (env.NATS_SERVER_BIN) {
    return (await isExecutable(env.NATS_SERVER_BIN)) ? env.NATS_SERVER_BIN : undefined;
  }
  const dirs = [...(env.PATH ?? '').split(delimiter).filter(Boolean), ...EXTRA_DIRS];
  for (const dir of dirs) {
    const candidate = join(dir, 'nats-server');
    if (await isExecutable(candidate)) return candidate;
  }
  return undefined;
}

async function isExecutable(path: string): Promise<boolean> {
  try {
    await access(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Resolves when `port` on `host` can be bound, and rejects with `EADDRINUSE` otherwise. */
export function checkPortFree(port: number, host = '127.0.0.1'): Promise<void> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen({ port, host, exclusive: true }, () => srv.close(() => resolve()));
  });
}

/**
 * The lowest port the kernel hands out to outgoing connections (Linux's `ip_local_port_range`).
 * A port picked inside that range can be taken by any process's next outgoing connection between
 * the pick and the bind, which on a busy machine with thousands of loopback connections happens.
 */
function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 2048 ? low : 32768;
  } catch {
    return 32768;
  }
}

const handedOut = new Set<number>();

/**
 * Where the processes of this user note the ports {@link freePort} handed them: one file per port,
 * holding the owner's pid. A port stays noted while its owner lives, so no other process is handed
 * it, also while it is not bound: a test's nats-server killed and about to be restarted on its
 * port left that port free, and another test file running at the same time was handed it and lost
 * the bind to the restarted server (EADDRINUSE; seen with 3 test files at a time).
 */
const reservations = join(tmpdir(), `parley-ports-${process.getuid?.() ?? 'user'}`);
let reservedAny = false;

/** Whether process `pid` is alive (a pid of another user's process counts as alive). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Notes `port` as this process's; false when a living process holds it already. */
function reserve(port: number): boolean {
  const file = join(reservations, String(port));
  if (!reservedAny) {
    mkdirSync(reservations, { recursive: true });
    // The files go with the process (a killed process's are taken over: its pid is gone).
    process.once('exit', () => {
      for (const p of handedOut)
        try {
          unlinkSync(join(reservations, String(p)));
        } catch {}
    });
    reservedAny = true;
  }
  try {
    writeFileSync(file, String(process.pid), { flag: 'wx' });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const owner = Number(readFileSync(file, 'utf8'));
  if (Number.isInteger(owner) && owner > 0 && alive(owner)) return false;
  writeFileSync(file, String(process.pid));
  return true;
}

/**
 * A free TCP port on the loopback interface, below the ephemeral range (so no outgoing connection
 * takes it before its user binds it), never the same one twice in a process, and never one handed
 * to another living process by this function (see {@link reservations}).
 */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  const high = ephemeralLow() - 1;
  const low = Math.max(1024, high - 16_383);
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = low + Math.floor(Math.random() * (high - low + 1));
    if (handedOut.has(port)) continue;
    try {
      await checkPortFree(port, host);
    } catch {
      continue;
    }
    if (!reserve(port)) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error(`no free port on ${host} between ${low} and ${high} after 200 tries`);
}

/** Operator-mode settings of a server. */
export interface OperatorModeConfig {
  operatorJwtPath: string;
  systemAccount: string;
  /** Directory of the full account resolver (accepts pushed account updates). */
  resolverDir: string;
  /** Account public key → JWT, loaded at start. */
  preload: Record<string, string>;
}

/** What {@link renderNatsConfig} writes. */
export interface NatsServerConfig {
  serverName: string;
  host: string;
  port: number;
  storeDir: string;
  /** Monitoring port (`/healthz`, `/varz`); omitted = no monitoring endpoint. */
  monitorPort?: number;
  operator?: OperatorModeConfig;
  /**
   * Cluster listener and routes. `advertise` is the route address this node gossips to the others
   * (default: its listen address).
   */
  cluster?: { name: string; host: string; port: number; routes: string[]; advertise?: string };
  /** JetStream limits. @default 1 GiB memory, 20 GiB file */
  maxMemory?: string;
  maxFile?: string;
  /** Where the server writes its pid. */
  pidFile?: string;
  /**
   * A NATS WebSocket listener for remote clients (SDK, MCP bridge on a laptop), with the same
   * operator-mode auth as the client port. Without `tls` it runs without TLS: for loopback only.
   */
  websocket?: { host: string; port: number; tls?: { certFile: string; keyFile: string } };
  /**
   * Seconds a client has from connecting to authenticating (operator mode). nats-server's default
   * is 2 s: many agents connecting at once to a loaded server missed it (`pnpm bench:scale`), and
   * the server closed them with "Authentication Timeout". @default 10
   */
  authTimeoutSeconds?: number;
  /** Extra lines appended verbatim. */
  extra?: string;
}

const q = (s: string) => JSON.stringify(s);

/** Renders a nats-server configuration file. */
export function renderNatsConfig(c: NatsServerConfig): string {
  const lines = [
    '# Written by Parley. Regenerated at every start: edit the Parley settings, not this file.',
    `server_name: ${q(c.serverName)}`,
    `host: ${q(c.host)}`,
    `port: ${c.port}`,
    'max_payload: 1MB',
    // How long a client has to send its CONNECT after the TCP connection: the default (about 2 s)
    // is missed by a reconnecting client on a busy machine, and nats.js gives up reconnecting for
    // good after the same authentication error twice (seen: a fan-out connection closed for good
    // on "Authentication Timeout" after a cluster restart, its partitions never delivered again).
    'authorization {',
    '  timeout: 10',
    '}',
  ];
  if (c.monitorPort !== undefined) lines.push(`http: ${q(`${c.host}:${c.monitorPort}`)}`);
  if (c.pidFile !== undefined) lines.push(`pid_file: ${q(c.pidFile)}`);
  lines.push(
    'jetstream {',
    `  store_dir: ${q(c.storeDir)}`,
    `  max_memory_store: ${c.maxMemory ?? '1GB'}`,
    `  max_file_store: ${c.maxFile ?? '20GB'}`,
    '}',
  );
  if (c.websocket) {
    lines.push(
      'websocket {',
      `  listen: ${q(`${c.websocket.host}:${c.websocket.port}`)}`,
      ...(c.websocket.tls
        ? [`  tls { cert_file: ${q(c.websocket.tls.certFile)}, key_file: ${q(c.websocket.tls.keyFile)} }`]
        : ['  no_tls: true']),
      '  compression: true',
      '}',
    );
  }
  if (c.cluster) {
    lines.push(
      'cluster {',
      `  name: ${q(c.cluster.name)}`,
      `  listen: ${q(`${c.cluster.host}:${c.cluster.port}`)}`,
      ...(c.cluster.advertise ? [`  advertise: ${q(c.cluster.advertise)}`] : []),
      `  routes: [${c.cluster.routes.map((r) => q(r)).join(', ')}]`,
      '}',
    );
  }
  if (c.operator) {
    lines.push(
      `operator: ${q(c.operator.operatorJwtPath)}`,
      `authorization { timeout: ${c.authTimeoutSeconds ?? 10} }`,
      `system_account: ${q(c.operator.systemAccount)}`,
      'resolver {',
      '  type: full',
      `  dir: ${q(c.operator.resolverDir)}`,
      '  allow_delete: false',
      '  interval: "2m"',
      '  timeout: "1.9s"',
      '}',
      'resolver_preload {',
      ...Object.entries(c.operator.preload).map(([k, v]) => `  ${k}: ${q(v)}`),
      '}',
    );
  }
  if (c.extra) lines.push(c.extra);
  return `${lines.join('\n')}\n`;
}

/** Options of {@link startNatsServer}. */
export interface StartNatsServerOptions {
  bin: string;
  configPath: string;
  config: NatsServerConfig;
  /** Where the server's log goes. */
  logPath: string;
  /** Milliseconds to wait for "Server is ready". @default 20000 */
  readyTimeoutMs?: number;
}

/** A running nats-server child process. */
export interface NatsServerProcess {
  readonly url: string;
  readonly pid: number | undefined;
  readonly config: NatsServerConfig;
  /** Resolves when the process has exited. */
  readonly exited: Promise<number | null>;
  /** False once the process has exited. */
  readonly running: boolean;
  /** SIGTERM, then SIGKILL after `graceMs`. */
  stop(graceMs?: number): Promise<void>;
  /** SIGKILL at once (crash simulation). */
  kill9(): Promise<void>;
}

/** Writes the configuration, starts nats-server and resolves once it logs "Server is ready". */
export async function startNatsServer(o: StartNatsServerOptions): Promise<NatsServerProcess> {
  await mkdir(dirname(o.configPath), { recursive: true });
  await mkdir(o.config.storeDir, { recursive: true });
  if (o.config.operator) await mkdir(o.config.operator.resolverDir, { recursive: true });
  await writeFile(o.configPath, renderNatsConfig(o.config));
  await mkdir(dirname(o.logPath), { recursive: true });
  const log = createWriteStream(o.logPath, { flags: 'a' });
  const child: ChildProcess = spawn(o.bin, ['-c', o.configPath], { stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let tail = '';
  const ready = new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      // Output can still arrive after 'exit' (the pipes drain later): keep it only while the log is open.
      if (!log.writableEnded) log.write(chunk);
      const text = chunk.toString();
      // Looked for in the chunk itself (with the end of the previous one, for a line split between
      // two): a recovering node writes thousands of lines at once, and one chunk of them with the
      // line early in it left it outside the kept tail — the node was up, yet "not ready after 90 s".
      if ((tail.slice(-64) + text).includes('Server is ready')) resolve();
      tail = (tail + text).slice(-4000);
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('error', reject);
    void exited.then((code) =>
      reject(new Error(`nats-server exited with code ${code} before it was ready:\n${tail.trim()}`)),
    );
  });
  const timeout = o.readyTimeoutMs ?? 20_000;
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      ready,
      new Promise((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`nats-server was not ready after ${timeout} ms:\n${tail.trim()}`)),
          timeout,
        );
      }),
    ]);
  } catch (err) {
    child.kill('SIGKILL');
    await exited;
    log.end();
    throw err;
  } finally {
    clearTimeout(timer);
  }
  void exited.then(() => log.end());
  const signal = async (sig: NodeJS.Signals, graceMs: number) => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill(sig);
    const t = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(t);
  };
  return {
    url: `nats://${o.config.host}:${o.config.port}`,
    pid: child.pid,
    config: o.config,
    exited,
    get running() {
      return child.exitCode === null && child.signalCode === null;
    },
    stop: (graceMs = 10_000) => signal('SIGTERM', graceMs),
    kill9: () => signal('SIGKILL', 0),
  };
}
