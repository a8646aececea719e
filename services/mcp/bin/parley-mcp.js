#!/usr/bin/env node
// parley-mcp: the stdio MCP server acting as an agent (the same as `parley mcp`).
// Loads the built code (dist/; run `pnpm build` after changing sources), or the sources under the
// `@parley/source` export condition.
import { main } from '@parley/mcp/cli';

process.exitCode = await main(process.argv.slice(2));
