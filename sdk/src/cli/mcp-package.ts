/**
 * Finding the `@parley/mcp` package at run time. The SDK does not depend on it (it depends on the
 * SDK), so `parley mcp` and `parley connect` look for it where the person installed it: next to
 * the project in the current directory, or next to the SDK itself.
 */
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';

/** What `parley mcp` needs of `@parley/mcp`: its stdio server. */
export interface McpStdioOptions {
  creds: string;
  servers?: string | string[];
  runtime?: string;
  session?: string;
  /** How often a long wait sends a progress notification, in ms. */
  progressIntervalMs?: number;
}

/** Runs the stdio MCP server until the client goes away. */
export type McpStdioServer = (options: McpStdioOptions) => Promise<void>;

/** Where `@parley/mcp` is installed: its entry module and its `parley-mcp` bin. */
export interface McpPackage {
  entry: string;
  bin: string;
}

/** Finds `@parley/mcp` from `cwd`, then from the SDK's own location; undefined when neither has it. */
export function findMcpPackage(cwd = process.cwd()): McpPackage | undefined {
  for (const base of [join(cwd, 'package.json'), import.meta.filename]) {
    try {
      const require = createRequire(base);
      const entry = require.resolve('@parley/mcp');
      const pkg = require.resolve('@parley/mcp/package.json');
      return { entry, bin: join(dirname(pkg), 'bin', 'parley-mcp.js') };
    } catch {
      // not installed there
    }
  }
  return undefined;
}

/** Loads the stdio server of `@parley/mcp`, or throws with what to install. */
export async function loadMcpServer(cwd = process.cwd()): Promise<McpStdioServer> {
  const found = findMcpPackage(cwd);
  if (!found) {
    throw new Error(
      'parley mcp needs the @parley/mcp package: npm i @parley/mcp (in this project or next to @parley/sdk)',
    );
  }
  const mod = (await import(pathToFileURL(found.entry).href)) as { runStdioServer: McpStdioServer };
  return mod.runStdioServer;
}
