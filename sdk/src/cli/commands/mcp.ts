import type { Command } from 'commander';
import type { CliContext } from '../context.js';
import { loadMcpServer } from '../mcp-package.js';

/** `parley mcp`: the stdio MCP server of `@parley/mcp`, acting as the agent of `--creds`. */
export function registerMcpCommands(program: Command, ctx: CliContext): void {
  program
    .command('mcp')
    .description(
      'run an MCP server on stdin/stdout acting as the agent of --creds (what `parley connect` configures Claude Code, Codex and Cursor to start)',
    )
    .requiredOption('--creds <file>', 'the agent’s creds file')
    .option('--runtime <name>', 'the runtime, for the session binding (e.g. claude-code)', 'mcp')
    .option('--session <key>', 'the session binding’s key: a restart with the same key resumes it', 'default')
    .option(
      '--progress-interval <ms>',
      'how often a long wait sends a progress notification',
      (v) => Number.parseInt(v, 10),
      10_000,
    )
    .action(
      async (
        o: { creds: string; runtime: string; session: string; progressInterval: number },
        cmd: Command,
      ) => {
        const g = ctx.globals(cmd);
        const run = ctx.mcp ?? (await loadMcpServer());
        await run({
          creds: o.creds,
          servers: g.server,
          runtime: o.runtime,
          session: o.session,
          progressIntervalMs: o.progressInterval,
        });
      },
    );
}
