import Fastify, { type FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { ParleyMetrics } from './metrics.js';

/** A readiness check: resolves true when that part is ready. */
export type ReadinessCheck = () => boolean | Promise<boolean>;

/** Options of {@link createHealthServer}. */
export interface HealthServerOptions {
  /** Named checks; `/healthz` is 200 only when every one passes. */
  checks: Record<string, ReadinessCheck>;
  log: Logger;
  /** Served as `GET /metrics` (Prometheus text format) when given. */
  metrics?: Pick<ParleyMetrics, 'render' | 'contentType'>;
}

/**
 * A Fastify app with `GET /healthz` (200 only when every check passes, else 503 with the failing
 * ones), `GET /readyz` (the same, for Kubernetes readiness) and, given metrics, `GET /metrics`
 * (Prometheus). Routes for the console or the gateway are registered on it by their owners.
 */
export function createHealthServer(options: HealthServerOptions): FastifyInstance {
  // Fastify's own request logging stays off: health probes every few seconds would drown the log.
  const app = Fastify();
  const log = options.log.child({ component: 'http' });
  app.setErrorHandler((err, _req, reply) => {
    // Fastify's own refusals of a request (an empty or unparsable JSON body, a wrong content type,
    // a body too large) are the client's mistake: 4xx with a code, never a 500.
    const status = (err as { statusCode?: number }).statusCode;
    if (status !== undefined && status >= 400 && status < 500) {
      const code = status === 413 ? 'PAYLOAD_TOO_LARGE' : 'INVALID_ARGUMENT';
      void reply.code(status).send({ error: { code, message: (err as Error).message } });
      return;
    }
    log.error({ err }, 'http handler failed');
    void reply.code(500).send({ error: { code: 'INTERNAL', message: 'internal error' } });
  });
  const evaluate = async () => {
    const results = await Promise.all(
      Object.entries(options.checks).map(async ([name, check]) => {
        try {
          return [name, await check()] as const;
        } catch {
          return [name, false] as const;
        }
      }),
    );
    return Object.fromEntries(results) as Record<string, boolean>;
  };
  const handler = async (_req: unknown, reply: import('fastify').FastifyReply) => {
    const checks = await evaluate();
    const ok = Object.values(checks).every(Boolean);
    return reply.code(ok ? 200 : 503).send({ status: ok ? 'ok' : 'unavailable', checks });
  };
  app.get('/healthz', handler);
  app.get('/readyz', handler);
  const metrics = options.metrics;
  if (metrics) {
    app.get('/metrics', async (_req, reply) =>
      reply
        .code(200)
        .header('content-type', metrics.contentType)
        .send(await metrics.render()),
    );
  }
  return app;
}
