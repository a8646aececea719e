#!/usr/bin/env node
import { runServiceProcess } from '@parley/kit';
import { loadConfig } from './config.js';
import { createRegistryService } from './service.js';

await runServiceProcess({ name: 'registry', loadConfig, create: (deps) => createRegistryService(deps) });
