#!/usr/bin/env node
/** The MCP service as its own process: bindings, tokens and the Streamable HTTP endpoint `/mcp`. */
import { runServiceProcess, serverList } from '@parley/kit';
import { loadConfig } from './config.js';
import { registerMcpHttp } from './http.js';
import { createMcpService } from './service.js';

await runServiceProcess({
  name: 'mcp',
  loadConfig,
  create: (deps) => createMcpService(deps),
  http: (app, { service, log, config }) =>
    registerMcpHttp(app, {
      service: service as ReturnType<typeof createMcpService>,
      log,
      allowedHosts: serverList(config.MCP_ALLOWED_HOSTS),
    }),
});
