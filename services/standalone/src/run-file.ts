/**
 * Where a running backbone says it runs, and what an earlier one left behind. While it runs,
 * `<home>/run.json` names the Node process, its nats-server child and their URLs (the CLI, `parley
 * mcp` and `connect()` read it to find the backbone); nats-server writes its own pid file. A clean
 * stop removes run.json. A start that finds them tells a backbone that still runs (refused: two
 * would share one store) from one that crashed (its nats-server, orphaned, is stopped).
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import type { Logger } from '@parley/kit';
import { type LocalRun, readLocalRun, runFile } from '@parley/sdk';
import type { homePaths } from './home.js';

type Paths = ReturnType<typeof homePaths>;

/** True when process `pid` exists (also when it is another user's). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The command line of `pid`, or undefined when it cannot be read. */
function commandLine(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    try {
      return execFileSync('ps', ['-o', 'command=', '-p', String(pid)], { encoding: 'utf8' });
    } catch {
      return undefined;
    }
  }
}

/**
 * A nats-server running this home's configuration, looked for in /proc (Linux): homes made before
 * the pid file existed, or whose pid file is gone, still get their orphan found.
 */
function findByConfig(config: string): number | undefined {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return undefined;
  }
  for (const e of entries) {
    if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
    let cmd: string;
    try {
      cmd = readFileSync(`/proc/${e}/cmdline`, 'utf8');
    } catch {
      continue; // gone meanwhile, or not ours to read
    }
    if (cmd.includes('nats-server') && cmd.includes(config)) return Number(e);
  }
  return undefined;
}

function readPid(path: string): number | undefined {
  try {
    const n = Number(readFileSync(path, 'utf8').trim());
    return Number.isInteger(n) && n > 0 ? n : undefined;
  } catch {
    return undefined;
  }
}

async function exitOf(pid: number, withinMs: number): Promise<boolean> {
  const until = Date.now() + withinMs;
  while (Date.now() < until) {
    if (!isAlive(pid)) return true;
    // Not our child: there is no exit event to wait for, only its pid to look at.
    await new Promise((r) => setTimeout(r, 50));
  }
  return !isAlive(pid);
}

/** A backbone of the same home that is running now. */
export class HomeInUseError extends Error {
  override name = 'HomeInUseError';
  constructor(
    readonly home: string,
    readonly run: LocalRun,
  ) {
    super(
      `Parley already runs from ${home} (pid ${run.pid}, ${run.natsUrl}, since ${run.startedAt}): use it, stop it first (Ctrl-C in its terminal, or kill ${run.pid}), or start another with --home <dir>. If pid ${run.pid} is not Parley, delete ${runFile(home)}`,
    );
  }
}

/**
 * Makes the home free for a start: refuses when its backbone still runs ({@link HomeInUseError});
 * stops a nats-server an earlier, crashed run left behind (found by its pid file, checked to be a
 * nats-server of this home). Resolves with a sentence saying what it stopped, if anything.
 */
export async function reclaimHome(paths: Paths, log: Logger): Promise<string | undefined> {
  const run = readLocalRun(paths.home);
  if (run && run.pid !== process.pid && isAlive(run.pid) && /node/.test(commandLine(run.pid) ?? 'node')) {
    throw new HomeInUseError(paths.home, run);
  }
  const pid = readPid(paths.natsPid) ?? run?.natsPid ?? findByConfig(paths.natsConfig);
  if (pid === undefined || !isAlive(pid)) return undefined;
  const cmd = commandLine(pid);
  // The pid may have been reused by an unrelated process since: only ours is stopped.
  if (cmd !== undefined && !(cmd.includes('nats-server') && cmd.includes(paths.natsConfig))) return undefined;
  log.info({ natsPid: pid }, 'stopping a nats-server left over from an earlier run');
  process.kill(pid, 'SIGTERM');
  if (!(await exitOf(pid, 5000))) {
    process.kill(pid, 'SIGKILL');
    await exitOf(pid, 2000);
  }
  return `stopped nats-server (pid ${pid}) that an earlier run of this home left behind`;
}

/** Writes run.json: where this backbone runs. */
export async function writeRun(paths: Paths, run: LocalRun): Promise<void> {
  await writeFile(runFile(paths.home), `${JSON.stringify(run, null, 2)}\n`);
}

/** Removes run.json if it is this process's. */
export async function removeRun(paths: Paths): Promise<void> {
  if (readLocalRun(paths.home)?.pid === process.pid) await rm(runFile(paths.home), { force: true });
}
