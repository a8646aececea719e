#!/usr/bin/env node
/** The gateway as its own process: the HTTP/WebSocket edge next to /healthz, and its NATS API. */
import { runServiceProcess, serverList } from '@parley/kit';
import { loadConfig } from './config.js';
import { registerGateway } from './http.js';
import { createGatewayService, type GatewayService } from './service.js';

await runServiceProcess({
  name: 'gateway',
  loadConfig,
  create: (deps) => createGatewayService({ ...deps, servers: serverList(deps.config.NATS_URL) }),
  http: (app, { service }) => registerGateway(app, { service: service as GatewayService }),
});
