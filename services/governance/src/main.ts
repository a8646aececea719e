#!/usr/bin/env node
import { runServiceProcess } from '@parley/kit';
import { loadConfig } from './config.js';
import { createGovernanceService } from './service.js';

await runServiceProcess({ name: 'governance', loadConfig, create: (deps) => createGovernanceService(deps) });
