/** `parley-mcp [--creds <file>] …`: the stdio MCP server, as `parley mcp` with this package built in. */
import { runCli } from '@parley/sdk/cli';
import { runStdioServer } from './stdio.js';

/** Runs `parley mcp <argv>`; resolves with the exit code. */
export function main(argv: string[]): Promise<number> {
  return runCli(['mcp', ...argv], undefined, process.env, { mcp: runStdioServer });
}
