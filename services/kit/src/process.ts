import type { NatsConnection } from '@nats-io/transport-node';
import type { Tracer } from '@opentelemetry/api';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { serverList, type TelemetryConfig } from './config.js';
import { createHealthServer } from './http.js';
import { createLogger } from './logger.js';
import { createMetrics, type ParleyMetrics } from './metrics.js';
import { connectNats } from './nats.js';
import type { ParleyService } from './service.js';
import { closeHttpServer, createShutdown } from './shutdown.js';
import { serviceNameOf, startTelemetry } from './telemetry.js';

/** The common part of every service's configuration. */
export interface ProcessConfig extends TelemetryConfig {
  NATS_URL: string;
  PARLEY_STOP_TIMEOUT_MS: number;
  NATS_CREDS?: string | undefined;
  NATS_RESPONDER_CREDS?: string | undefined;
  LOG_LEVEL: string;
  HTTP_HOST: string;
  HTTP_PORT: number;
}

/** Options of {@link runServiceProcess}. */
export interface RunServiceProcessOptions<C extends ProcessConfig> {
  /** e.g. `rooms`; the process is `parley-rooms`, its NATS principal `svc_rooms`. */
  name: string;
  /** Reads the configuration (the service's `loadConfig`). */
  loadConfig: () => C;
  /** Builds the service. */
  create: (deps: {
    nc: NatsConnection;
    /** Where requests are received and answered (see ServiceResponder). */
    responder: NatsConnection;
    /**
     * Opens another connection with the service's creds whose reply prefix is `_INBOX.<principal>`,
     * for a service that makes requests on a principal's behalf (the MCP HTTP endpoint).
     */
    connectAs: (principal: string) => Promise<NatsConnection>;
    /** Another connection with the same credentials (the service drains what it opened). */
    connect: (purpose: string) => Promise<NatsConnection>;
    log: Logger;
    config: C;
    tracer: Tracer;
    metrics: ParleyMetrics;
  }) => ParleyService | Promise<ParleyService>;
  /**
   * Routes of the service on its HTTP server (next to /healthz, /readyz and /metrics), registered
   * after the service started.
   */
  http?: (
    app: FastifyInstance,
    deps: { service: ParleyService; log: Logger; config: C },
  ) => void | Promise<void>;
}

/**
 * The `main.ts` of every service run as its own process (as in Kubernetes): config → logger →
 * telemetry → NATS → service.start() → health and metrics endpoint; SIGTERM/SIGINT stop the
 * service, drain NATS, flush telemetry and exit.
 */
export async function runServiceProcess<C extends ProcessConfig>(
  o: RunServiceProcessOptions<C>,
): Promise<void> {
  let config: C;
  try {
    config = o.loadConfig();
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    process.exit(2);
  }
  const log = createLogger({ name: `parley-${o.name}`, level: config.LOG_LEVEL });
  const telemetry = await startTelemetry({
    config,
    serviceName: serviceNameOf(o.name),
    primaryService: o.name,
    log,
  });
  const metrics = createMetrics();
  const connect = (purpose?: string) =>
    connectNats({
      servers: serverList(config.NATS_URL),
      name: purpose ? `parley-${o.name}-${purpose}` : `parley-${o.name}`,
      principal: `svc_${o.name}`,
      ...(config.NATS_CREDS ? { creds: config.NATS_CREDS } : {}),
      log,
    });
  const nc = await connect();
  // Requests are received and answered on a least-privilege connection of their own (ServiceResponder).
  let responder = nc;
  if (config.NATS_RESPONDER_CREDS) {
    responder = await connectNats({
      servers: serverList(config.NATS_URL),
      name: `parley-${o.name}-responder`,
      principal: `svc_${o.name}`,
      creds: config.NATS_RESPONDER_CREDS,
      log,
    });
  } else if (config.NATS_CREDS) {
    log.warn(
      'no NATS_RESPONDER_CREDS: requests are answered on the service connection (replies are still checked, but the NATS server does not back the check up)',
    );
  }
  const service = await o.create({
    nc,
    responder,
    connect,
    connectAs: (principal) =>
      connectNats({
        servers: serverList(config.NATS_URL),
        name: `parley-${o.name}-as-${principal}`,
        principal,
        ...(config.NATS_CREDS ? { creds: config.NATS_CREDS } : {}),
        log,
      }),
    log,
    config,
    tracer: telemetry.tracer(o.name),
    metrics,
  });
  // The health endpoint comes after the start: a start that does not end says so while it waits.
  const started = Date.now();
  const slowStart = setInterval(
    () =>
      log.warn(
        { ms: Date.now() - started, waitingFor: service.starting?.() ?? null },
        `${o.name} is still starting (no health endpoint yet)`,
      ),
    15_000,
  );
  slowStart.unref();
  await service.start().finally(() => clearInterval(slowStart));
  const http = createHealthServer({
    log,
    checks: {
      nats: () => !nc.isClosed() && !responder.isClosed(),
      [o.name]: () => service.ready(),
      ...service.checks,
    },
    metrics,
  });
  await o.http?.(http, { service, log, config });
  await http.listen({ host: config.HTTP_HOST, port: config.HTTP_PORT });
  log.info(
    {
      nats: config.NATS_URL,
      http: `${config.HTTP_HOST}:${config.HTTP_PORT}`,
      telemetry: telemetry.mode,
      ...(telemetry.exportTo ? { traces: telemetry.exportTo } : {}),
    },
    `parley-${o.name} started`,
  );
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'stopping');
    const shutdown = createShutdown(config.PARLEY_STOP_TIMEOUT_MS, log);
    const { step } = shutdown;
    // HTTP first: routes of the service (e.g. MCP sessions) still need the connection to close.
    await step('the HTTP server', () => closeHttpServer(http));
    // A slow stop under load is not a stuck one: the service may take what is left of the deadline.
    await step(`the ${o.name} service`, () => service.stop(), Number.POSITIVE_INFINITY);
    await shutdown.connections(responder === nc ? [nc] : [responder, nc]);
    await step('telemetry', () => telemetry.shutdown(), 3_000);
    if (shutdown.incomplete()) {
      const { abandoned, notRun } = shutdown;
      log.error(
        { abandoned, notRun, deadlineMs: config.PARLEY_STOP_TIMEOUT_MS },
        `did not stop within ${config.PARLEY_STOP_TIMEOUT_MS} ms: gave up on ${abandoned.join(', ') || 'nothing'}${notRun.length ? `; not run: ${notRun.join(', ')}` : ''}`,
      );
      process.exit(1);
    }
    log.info('stopped');
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop('SIGTERM'));
  process.once('SIGINT', () => void stop('SIGINT'));
}
