import { existsSync } from 'node:fs';
import { isParleyError, ParleyError } from '@parley/contracts';
import type { Command } from 'commander';
import { type Agent, type AgentOptions, connect } from '../agent.js';
import { localBackbone } from '../local-home.js';
import type { McpStdioServer } from './mcp-package.js';

/** Global options shared by every command. */
export interface GlobalOptions {
  as?: string;
  /** `--server`, else `NATS_URL`, else where the local backbone runs (run.json), else the default. */
  server: string;
  json?: boolean;
}

/** Output sinks (injectable for tests). */
export interface Io {
  out(line: string): void;
  err(line: string): void;
  /** Everything on stdin (`parley send <room> -`). @default the process's stdin */
  readStdin?(): Promise<string>;
}

/** What each command group gets to register its commands. */
export interface CliContext {
  io: Io;
  env: Record<string, string | undefined>;
  /** The global options with `--server` resolved (see {@link GlobalOptions.server}). */
  globals(cmd: Command): GlobalOptions;
  /** Connects as `--as` (default: the local admin), runs `fn`, closes. */
  withAgent<T>(
    cmd: Command,
    fn: (agent: Agent, g: GlobalOptions) => Promise<T>,
    options?: Omit<AgentOptions, 'creds' | 'servers'>,
  ): Promise<T>;
  /** Prints `value` as JSON with --json, else `text(value)`. */
  print<T>(cmd: Command, value: T, text: (value: T) => string): void;
  /** The stdio MCP server, when the embedding program provides it (`parley-mcp` does). */
  mcp?: McpStdioServer;
}

/** What a program embedding the CLI can add. */
export interface CliExtensions {
  /** The stdio MCP server for `parley mcp` (by default `@parley/mcp` is looked up at run time). */
  mcp?: McpStdioServer;
}

/** Where the default admin creds are: `$PARLEY_HOME/creds/admin.creds` or `./.parley/creds/admin.creds`. */
export function defaultCreds(
  env: Record<string, string | undefined> = process.env,
  cwd = process.cwd(),
): string {
  return localBackbone(env, cwd).adminCreds;
}

/** Builds the context the command groups use. */
export function createContext(
  io: Io,
  env: Record<string, string | undefined>,
  extensions: CliExtensions = {},
): CliContext {
  const globals = (cmd: Command): GlobalOptions => {
    const g = cmd.optsWithGlobals<Partial<GlobalOptions>>();
    return { ...g, server: g.server ?? localBackbone(env).natsUrl };
  };
  return {
    io,
    env,
    globals,
    ...(extensions.mcp ? { mcp: extensions.mcp } : {}),
    async withAgent(cmd, fn, options = {}) {
      const g = globals(cmd);
      const local = localBackbone(env);
      const creds = g.as ?? local.adminCreds;
      if (!g.as && !existsSync(creds)) {
        throw new ParleyError(
          'INVALID_ARGUMENT',
          `no --as given and no local admin creds at ${creds}: start Parley with npm start (or set PARLEY_HOME to the home it runs from), or pass --as <file.creds>`,
        );
      }
      // A command is not the participant being present: no heartbeats.
      const agent = await connect({ presence: false, ...options, servers: g.server, creds }).catch(
        (err: unknown) => {
          // Nothing named a server: say where we looked, and what that means.
          if (isParleyError(err, 'UNAVAILABLE') && !cmd.optsWithGlobals().server) {
            if (local.natsUrlFrom === 'default') {
              throw new ParleyError(
                'UNAVAILABLE',
                `${err.message}. Parley is not running from ${local.home} (while it runs, ${local.home}/run.json says where): start it with npm start, set PARLEY_HOME to the --home it runs from, or pass --server <url>`,
                { cause: err },
              );
            }
            if (local.natsUrlFrom === 'run.json' && local.run) {
              throw new ParleyError(
                'UNAVAILABLE',
                `${err.message}. ${local.home}/run.json names a backbone (pid ${local.run.pid}, started ${local.run.startedAt}) that is not answering: it stopped without cleaning up, or is stuck. Start it again with npm start (a leftover nats-server is stopped first)`,
                { cause: err },
              );
            }
          }
          throw err;
        },
      );
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
