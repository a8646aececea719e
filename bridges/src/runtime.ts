/**
 * Starting a bridge like every Parley service: the agent connection (its own creds, runtime
 * `bridge`), the mapping, the state directory, Prometheus metrics and `/healthz` `/readyz`
 * `/metrics` on one Fastify app that source adapters with webhooks add their routes to.
 */
import { readFile } from 'node:fs/promises';
import type { Tracer } from '@parley/contracts';
import { createHealthServer, type Logger, type ParleyMetrics } from '@parley/kit';
import { type Agent, connect } from '@parley/sdk';
import type { FastifyInstance } from 'fastify';
import { Bridge } from './bridge.js';
import { type BridgeMapping, loadMapping } from './mapping.js';
import { createBridgeMetrics } from './metrics.js';
import { BridgeState } from './state.js';

/** Options of {@link startBridge}. */
export interface StartBridgeOptions {
  servers: string | string[];
  /** The bridge agent's creds (path or contents). */
  creds: string;
  /** The mapping: YAML text, a path to a YAML file (`*.yaml`/`*.yml`), or a parsed mapping. */
  mapping: string | BridgeMapping;
  /** The directory of the cursor, case rooms and dead letters. */
  stateDir: string;
  log: Logger;
  env?: Record<string, string | undefined>;
  tracer?: Tracer;
  /** Process metrics (CPU, memory…) next to the bridge's. @default true */
  processMetrics?: boolean;
}

/** A started bridge and its HTTP app (not listening yet: adapters add routes first). */
export interface RunningBridge {
  bridge: Bridge;
  agent: Agent;
  app: FastifyInstance;
  /** The process's metrics (kit), the bridge series among them. */
  metrics: ParleyMetrics;
  /** Closes the app and the agent. */
  stop(): Promise<void>;
}

/** Reads the mapping whichever way it was given. */
export async function readMapping(mapping: string | BridgeMapping): Promise<BridgeMapping> {
  if (typeof mapping !== 'string') return loadMapping(mapping);
  if (/\.ya?ml$/i.test(mapping) && !mapping.includes('\n'))
    return loadMapping(await readFile(mapping, 'utf8'));
  return loadMapping(mapping);
}

/** Connects the bridge agent and prepares its state, metrics and health endpoints. */
export async function startBridge(o: StartBridgeOptions): Promise<RunningBridge> {
  const mapping = await readMapping(o.mapping);
  const state = await BridgeState.open(o.stateDir);
  const agent = await connect({
    servers: o.servers,
    creds: o.creds,
    name: `parley-bridge:${mapping.bridge}`,
    ...(o.tracer ? { tracer: o.tracer } : {}),
  });
  const metrics = createBridgeMetrics(mapping.bridge, { processMetrics: o.processMetrics ?? true });
  const bridge = new Bridge({
    agent,
    mapping,
    state,
    log: o.log,
    metrics,
    ...(o.env ? { env: o.env } : {}),
    ...(o.tracer ? { tracer: o.tracer } : {}),
  });
  const app = createHealthServer({
    log: o.log,
    checks: {
      nats: () => !agent.nc.isClosed(),
      source: () => bridge.sourceDownReason === undefined,
    },
    metrics: metrics.parley,
  });
  return {
    bridge,
    agent,
    app,
    metrics: metrics.parley,
    async stop() {
      await app.close();
      await agent.close();
    },
  };
}
