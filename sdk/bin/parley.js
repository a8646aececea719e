#!/usr/bin/env node
// The parley CLI. Built code is in dist/; run `pnpm build` after changing sources.
import '../dist/cli/run.js';
