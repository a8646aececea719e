/**
 * The `parley` command line. Every command takes `--as <creds>` (default: the local admin creds under
 * `.parley/`), `--server <url>`, and `--json` for machine-readable output. A refusal prints
 * `CODE: message` on stderr and exits 1.
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { isParleyError } from '@parley/contracts';
import { Command } from 'commander';
import { type Agent, connect } from '../agent.js';

/** Global options shared by every command. */
export interface GlobalOptions {
  as?: string;
  server: string;
  json?: boolean;
}

/** Where the default admin creds are: `$PARLEY_HOME/creds/admin.creds` or `./.parley/creds/admin.creds`. */
export function defaultCreds(
  env: Record<string, string | undefined> = process.env,
  cwd = process.cwd(),
): string {
  const home = env.PARLEY_HOME ? resolve(cwd, env.PARLEY_HOME) : join(cwd, '.parley');
  return join(home, 'creds', 'admin.creds');
}

/** Output helpers bound to stdout/stderr (injectable for tests). */
export interface Io {
  out(line: string): void;
  err(line: string): void;
}

const processIo: Io = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
};

/** Builds the CLI program. */
export function buildProgram(
  io: Io = processIo,
  env: Record<string, string | undefined> = process.env,
): Command {
  const program = new Command('parley')
    .description('Parley: the interaction layer for AI agents, on NATS JetStream.')
    .option('--as <creds>', 'creds file of the participant to act as (default: the local admin)')
    .option('--server <url>', 'NATS server URL', env.NATS_URL ?? 'nats://127.0.0.1:4222')
    .option('--json', 'print JSON')
    .showHelpAfterError()
    .configureOutput({ writeOut: (s) => io.out(s.trimEnd()), writeErr: (s) => io.err(s.trimEnd()) });

  const withAgent = async <T>(
    cmd: Command,
    fn: (agent: Agent, g: GlobalOptions) => Promise<T>,
  ): Promise<T> => {
    const g = cmd.optsWithGlobals<GlobalOptions>();
    const creds = g.as ?? defaultCreds(env);
    if (!g.as && !existsSync(creds)) {
      throw new Error(
        `no --as given and no local admin creds at ${creds}: start Parley with npm start, or pass --as <file.creds>`,
      );
    }
    const agent = await connect({ servers: g.server, creds });
    try {
      return await fn(agent, g);
    } finally {
      await agent.close();
    }
  };

  program
    .command('whoami')
    .description('show who the creds belong to, as the registry knows them')
    .action(async (_o, cmd: Command) => {
      await withAgent(cmd, async (agent, g) => {
        const me = await agent.whoami();
        if (g.json) io.out(JSON.stringify(me, null, 2));
        else
          io.out(
            `${me.id}  ${me.kind}${me.name ? `  ${me.name}` : ''}${me.org ? `  org ${me.org}` : ''}${me.role ? `  ${me.role}` : ''}`,
          );
      });
    });

  return program;
}

/** Runs the CLI; resolves with the exit code. */
export async function runCli(argv: string[], io: Io = processIo, env = process.env): Promise<number> {
  const program = buildProgram(io, env).exitOverride();
  try {
    await program.parseAsync(argv, { from: 'user' });
    return 0;
  } catch (err) {
    const e = err as { code?: string; exitCode?: number; message?: string };
    if (typeof e.code === 'string' && e.code.startsWith('commander.')) {
      return e.code === 'commander.helpDisplayed' || e.code === 'commander.version' ? 0 : (e.exitCode ?? 1);
    }
    if (isParleyError(err)) io.err(`${err.code}: ${err.message}`);
    else io.err(`error: ${e.message ?? String(err)}`);
    return 1;
  }
}
