#!/usr/bin/env node
// parley-init keys|backbone. Built code is in dist/; run `pnpm build` after changing sources.
import '../dist/main.js';
