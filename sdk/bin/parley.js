#!/usr/bin/env node
// The parley CLI. Built code is in dist/; run `pnpm build` after changing sources.
import { runCli } from '../dist/cli/main.js';

process.exitCode = await runCli(process.argv.slice(2));
