import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { serverList } from './config.js';
import { createHealthServer } from './http.js';
import { createLogger } from './logger.js';
import { connectNats } from './nats.js';
import type { ParleyService } from './service.js';

/** The common part of every service's configuration. */
export interface ProcessConfig {
  NATS_URL: string;
  NATS_CREDS?: string | undefined;
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
  create: (deps: { nc: NatsConnection; log: Logger; config: C }) => ParleyService | Promise<ParleyService>;
}

/**
 * The `main.ts` of every service run as its own process (as in Kubernetes): config → logger → NATS →
 * service.start() → health endpoint; SIGTERM/SIGINT stop the service, drain NATS and exit.
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
  const nc = await connectNats({
    servers: serverList(config.NATS_URL),
    name: `parley-${o.name}`,
    principal: `svc_${o.name}`,
    ...(config.NATS_CREDS ? { creds: config.NATS_CREDS } : {}),
  });
  const service = await o.create({ nc, log, config });
  await service.start();
  const http = createHealthServer({
    log,
    checks: { nats: () => !nc.isClosed(), [o.name]: () => service.ready() },
  });
  await http.listen({ host: config.HTTP_HOST, port: config.HTTP_PORT });
  log.info(
    { nats: config.NATS_URL, http: `${config.HTTP_HOST}:${config.HTTP_PORT}` },
    `parley-${o.name} started`,
  );
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'stopping');
    await service.stop();
    await nc.drain().catch(() => undefined);
    await http.close();
    log.info('stopped');
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop('SIGTERM'));
  process.once('SIGINT', () => void stop('SIGINT'));
}
