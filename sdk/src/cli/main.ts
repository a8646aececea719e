/**
 * The `parley` command line. Every command takes `--as <creds>` (default: the local admin creds under
 * `.parley/`), `--server <url>`, and `--json` for machine-readable output. A refusal prints
 * `CODE: message` on stderr and exits 1.
 *
 * Each command group lives in `commands/<group>.ts` and registers itself here.
 */

import { isParleyError } from '@parley/contracts';
import { Command } from 'commander';
import { localEnvironment } from '../local-home.js';
import { registerAgentCommands } from './commands/agent.js';
import { registerApprovalCommands } from './commands/approvals.js';
import { registerConnectCommands } from './commands/connect.js';
import { registerContactCommands } from './commands/contacts.js';
import { registerDiscoverCommands } from './commands/discover.js';
import { registerDoctorCommand } from './commands/doctor.js';
import { registerGatewayCommands } from './commands/gateway.js';
import { registerGovernanceCommands } from './commands/governance.js';
import { registerIdentityCommands } from './commands/identity.js';
import { registerMcpCommands } from './commands/mcp.js';
import { registerOrgCommands } from './commands/org.js';
import { registerRoomGuardCommands } from './commands/room-guards.js';
import { registerRoomCommands } from './commands/rooms.js';
import { registerTaskCommands } from './commands/tasks.js';
import { registerTraceCommands } from './commands/trace.js';
import { registerUserCommands } from './commands/user.js';
import { type CliExtensions, createContext, type Io } from './context.js';

export { type CliExtensions, defaultCreds, type Io } from './context.js';
export { findMcpPackage, type McpStdioOptions, type McpStdioServer } from './mcp-package.js';

/** The environment the CLI reads, as `parley --help` lists it. */
const environmentHelp = [
  '',
  'Environment:',
  ...Object.entries({
    ...localEnvironment,
    PARLEY_JAEGER_URL: 'Jaeger UI base URL; parley trace prints a link to the trace there',
    CODEX_HOME: 'where parley connect codex writes config.toml; default ~/.codex',
    HOME: 'parley connect writes agent creds to $HOME/.parley/agents/',
  }).map(([name, what]) => `  ${name.padEnd(18)} ${what}`),
  '',
  'Without --as, commands act as the local admin ($PARLEY_HOME/creds/admin.creds). A refusal prints',
  'CODE: message on stderr and exits 1.',
].join('\n');

const processIo: Io = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
};

/** Builds the CLI program. */
export function buildProgram(
  io: Io = processIo,
  env: Record<string, string | undefined> = process.env,
  extensions: CliExtensions = {},
): Command {
  // What the commands read of the environment; --home stands for PARLEY_HOME (set before any action).
  const view = { ...env };
  const program = new Command('parley')
    .description('Parley: the interaction layer for AI agents, on NATS JetStream.')
    .option(
      '--home <dir>',
      'the local backbone’s home, as npm start --home (default: $PARLEY_HOME, else the nearest .parley)',
    )
    .option('--as <creds>', 'creds file of the participant to act as (default: the local admin)')
    .option(
      '--server <url>',
      'NATS server URL (default: $NATS_URL, else where npm start runs, from its run.json, else nats://127.0.0.1:4222)',
    )
    .option('--json', 'print JSON')
    .addHelpText('after', environmentHelp)
    .showHelpAfterError()
    // Inherited by every command added below: errors come back to runCli instead of exiting.
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.out(s.trimEnd()), writeErr: (s) => io.err(s.trimEnd()) })
    .hook('preAction', (root) => {
      const home = root.opts<{ home?: string }>().home;
      if (home !== undefined) view.PARLEY_HOME = home;
    });
  const ctx = createContext(io, view, extensions);
  registerIdentityCommands(program, ctx);
  registerOrgCommands(program, ctx);
  registerUserCommands(program, ctx);
  registerAgentCommands(program, ctx);
  registerDiscoverCommands(program, ctx);
  registerRoomCommands(program, ctx);
  registerRoomGuardCommands(program, ctx);
  registerGovernanceCommands(program, ctx);
  registerContactCommands(program, ctx);
  registerTaskCommands(program, ctx);
  registerApprovalCommands(program, ctx);
  registerTraceCommands(program, ctx);
  registerConnectCommands(program, ctx);
  registerMcpCommands(program, ctx);
  registerDoctorCommand(program, ctx);
  registerGatewayCommands(program, ctx);
  return program;
}

/** Runs the CLI; resolves with the exit code. */
export async function runCli(
  argv: string[],
  io: Io = processIo,
  env = process.env,
  extensions: CliExtensions = {},
): Promise<number> {
  const program = buildProgram(io, env, extensions);
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
