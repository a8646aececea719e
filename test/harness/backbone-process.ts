import { type ChildProcess, spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { waitFor } from './wait.js';

const root = resolve(import.meta.dirname, '../..');

/** `npm start`'s backbone (services/standalone/src/main.ts) running as its own process. */
export interface BackboneProcess {
  readonly pid: number;
  /** stdout and stderr so far. */
  output(): string;
  /** Resolves when `text` has been printed (rejects early if the process exits first). */
  waitForOutput(text: string, timeoutMs?: number): Promise<void>;
  /** Resolves with the exit code (null when killed by a signal). */
  readonly exited: Promise<number | null>;
  signal(sig: NodeJS.Signals): void;
  /**
   * Stops it as Ctrl-C does (SIGTERM) and waits, so its nats-server goes with it; SIGKILL only if
   * it is still there after `graceMs`. Nothing when it has exited already.
   */
  stop(graceMs?: number): Promise<number | null>;
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of live) c.kill('SIGKILL');
});

/**
 * Starts the backbone as `npm start` does after its bootstrap (the sources through tsx), with
 * `args` (e.g. --home, --nats-port, --http-port) and `env` on top of this process's environment.
 * A process still running when the test process exits is killed.
 */
export function startBackboneProcess(
  args: string[],
  env: Record<string, string> = {},
  cwd = root,
): BackboneProcess {
  const child = spawn(process.execPath, [resolve(root, 'services/standalone/src/main.ts'), ...args], {
    cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LOG_LEVEL: 'error', ...env },
  });
  live.add(child);
  let out = '';
  child.stdout?.on('data', (d) => {
    out += d;
  });
  child.stderr?.on('data', (d) => {
    out += d;
  });
  let dead = false;
  const exited = new Promise<number | null>((r) =>
    child.once('exit', (code) => {
      dead = true;
      live.delete(child);
      r(code);
    }),
  );
  return {
    pid: child.pid ?? 0,
    output: () => out,
    exited,
    signal: (sig) => child.kill(sig),
    async stop(graceMs = 20_000) {
      if (dead) return exited;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      try {
        return await exited;
      } finally {
        clearTimeout(timer);
      }
    },
    waitForOutput: (text, timeoutMs = 120_000) =>
      waitFor(
        () => {
          if (out.includes(text)) return true;
          if (dead) throw new Error(`the backbone exited before printing “${text}”:\n${out}`);
          return false;
        },
        () => `“${text}” in the output:\n${out}`,
        timeoutMs,
      ),
  };
}
