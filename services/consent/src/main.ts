#!/usr/bin/env node
import { runServiceProcess } from '@parley/kit';
import { loadConfig } from './config.js';
import { createConsentService } from './service.js';

await runServiceProcess({ name: 'consent', loadConfig, create: (deps) => createConsentService(deps) });
