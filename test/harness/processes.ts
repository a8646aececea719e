import { type ChildProcess, spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { freePort } from '@parley/nats-server';
import { waitFor, within } from './wait.js';

const root = resolve(import.meta.dirname, '../..');

/** A Parley service running as its own OS process (as in Kubernetes). */
export interface ServiceProcess {
  readonly name: string;
  readonly healthUrl: string;
  /** Output so far (stdout and stderr). */
  output(): string;
  /** Whether the process has not exited yet. */
  running(): boolean;
  /** SIGKILL: a crash. */
  kill9(): Promise<void>;
  /**
   * SIGTERM and wait for the exit code. A process still running {@link STOP_TIMEOUT_MS} later is
   * killed (SIGKILL), and the stop rejects with the end of its output: a stop that hangs fails the
   * test that asked for it instead of keeping the file alive until the runner's 300 s limit.
   */
  stop(): Promise<number | null>;
}

/** How long a service process may take to answer /healthz, ms (generous: see the wait below). */
const START_TIMEOUT_MS = 120_000;

/**
 * How long a service process may take to exit after SIGTERM, ms: its own stop gives up after
 * PARLEY_STOP_TIMEOUT_MS (20 s by default) and exits 1 naming what hung.
 */
const STOP_TIMEOUT_MS = 40_000;

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

/**
 * Starts `services/<service>/src/main.ts` in a child process with `env` (the sources run through the
 * same tsx loader as the tests) and waits until its /healthz answers 200.
 */
export async function startServiceProcess(
  service: string,
  env: Record<string, string>,
): Promise<ServiceProcess> {
  const port = await freePort();
  const child = spawn(process.execPath, [`services/${service}/src/main.ts`], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
    // PARLEY_TEST_LOG (e.g. info) also sets the processes' level: a start that hangs then says where.
    env: {
      ...process.env,
      LOG_LEVEL: process.env.PARLEY_TEST_LOG ?? 'warn',
      HTTP_HOST: '127.0.0.1',
      HTTP_PORT: String(port),
      ...env,
    },
  });
  live.add(child);
  let out = '';
  child.stdout?.on('data', (d) => {
    out += d;
  });
  child.stderr?.on('data', (d) => {
    out += d;
  });
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  void exited.then(() => live.delete(child));
  const healthUrl = `http://127.0.0.1:${port}/healthz`;
  let dead = false;
  void exited.then(() => {
    dead = true;
  });
  // The wait ends on the event (healthy, or the process exited); the bound only catches a start that
  // hangs. 30 s was too short with the load average at 60: a tsx-compiled service start alone took
  // longer there, while the same start takes 2–5 s on an idle machine.
  try {
    await waitFor(
      async () => {
        if (dead) throw new Error(`${service} exited during start:\n${out}`);
        return (await fetch(healthUrl).catch(() => undefined))?.status === 200;
      },
      () => `${service} to become healthy (output so far:\n${out.slice(-4_000)})`,
      START_TIMEOUT_MS,
    );
  } catch (err) {
    // A process that never became healthy is nobody's to stop: left running, it kept the test
    // file alive until the runner's 300 s per-file limit.
    child.kill('SIGKILL');
    await exited;
    throw err;
  }
  return {
    name: service,
    healthUrl,
    output: () => out,
    running: () => !dead,
    async kill9() {
      child.kill('SIGKILL');
      await exited;
    },
    async stop() {
      child.kill('SIGTERM');
      const code = await within(exited, STOP_TIMEOUT_MS, 'timeout' as const);
      if (code !== 'timeout') return code;
      child.kill('SIGKILL');
      await exited;
      throw new Error(
        `${service} did not exit within ${STOP_TIMEOUT_MS / 1000} s of SIGTERM (killed); its output ends:\n${out.slice(-4_000)}`,
      );
    },
  };
}

/**
 * Stops every process still running (SIGTERM, at once), then throws if one did not stop cleanly:
 * killed after hanging (its error names what it printed) or exited with a code other than 0.
 */
export async function stopProcesses(processes: readonly (ServiceProcess | undefined)[]): Promise<void> {
  const running = processes.filter((p) => p?.running()) as ServiceProcess[];
  const results = await Promise.allSettled(running.map((p) => p.stop()));
  const problems = results.flatMap((r, i) => {
    const p = running[i] as ServiceProcess;
    if (r.status === 'rejected') return [(r.reason as Error).message];
    return r.value === 0
      ? []
      : [`${p.name} exited ${r.value} on SIGTERM; its output ends:\n${p.output().slice(-4_000)}`];
  });
  if (problems.length) throw new Error(problems.join('\n\n'));
}
