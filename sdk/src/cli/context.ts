import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Command } from 'commander';
import { type Agent, type AgentOptions, connect } from '../agent.js';

/** Global options shared by every command. */
export interface GlobalOptions {
  as?: string;
  server: string;
  json?: boolean;
}

/** Output sinks (injectable for tests). */
export interface Io {
  out(line: string): void;
  err(line: string): void;
}

/** What each command group gets to register its commands. */
export interface CliContext {
  io: Io;
  env: Record<string, string | undefined>;
  /** Connects as `--as` (default: the local admin), runs `fn`, closes. */
  withAgent<T>(
    cmd: Command,
    fn: (agent: Agent, g: GlobalOptions) => Promise<T>,
    options?: Omit<AgentOptions, 'creds' | 'servers'>,
  ): Promise<T>;
  /** Prints `value` as JSON with --json, else `text(value)`. */
  print<T>(cmd: Command, value: T, text: (value: T) => string): void;
}

/** Where the default admin creds are: `$PARLEY_HOME/creds/admin.creds` or `./.parley/creds/admin.creds`. */
export function defaultCreds(
  env: Record<string, string | undefined> = process.env,
  cwd = process.cwd(),
): string {
  const home = env.PARLEY_HOME ? resolve(cwd, env.PARLEY_HOME) : join(cwd, '.parley');
  return join(home, 'creds', 'admin.creds');
}

/** Builds the context the command groups use. */
export function createContext(io: Io, env: Record<string, string | undefined>): CliContext {
  return {
    io,
    env,
    async withAgent(cmd, fn, options = {}) {
      const g = cmd.optsWithGlobals<GlobalOptions>();
      const creds = g.as ?? defaultCreds(env);
      if (!g.as && !existsSync(creds)) {
        throw new Error(
          `no --as given and no local admin creds at ${creds}: start Parley with npm start, or pass --as <file.creds>`,
        );
      }
      // A command is not the participant being present: no heartbeats.
      const agent = await connect({ presence: false, ...options, servers: g.server, creds });
      try {
        return await fn(agent, g);
      } finally {
        await agent.close();
      }
    },
    print(cmd, value, text) {
      if (cmd.optsWithGlobals<GlobalOptions>().json) io.out(JSON.stringify(value, null, 2));
      else io.out(text(value));
    },
  };
}
