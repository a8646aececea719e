#!/usr/bin/env node
import { runServiceProcess } from '@parley/kit';
import { loadConfig } from './config.js';
import { createRoomsService } from './service.js';

await runServiceProcess({ name: 'rooms', loadConfig, create: (deps) => createRoomsService(deps) });
