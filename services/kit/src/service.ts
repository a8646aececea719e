import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Tracer } from '@opentelemetry/api';
import type { ParleyMetrics } from './metrics.js';

/** What every Parley service returns from its `create…Service(deps)`. */
export interface ParleyService {
  /** e.g. `rooms`. */
  readonly name: string;
  /** Subscribes and starts background work. Resolves once the service answers requests. */
  start(): Promise<void>;
  /** Stops taking work, lets in-flight work finish, releases what it holds (leases). */
  stop(): Promise<void>;
  /** True while the service is started and healthy. */
  ready(): boolean;
  /** While start() has not ended: what it waits for (said by a start that takes long). */
  starting?: () => string | undefined;
  /** Further named health checks for `/healthz` (e.g. the fan-out: every partition has a holder). */
  checks?: Record<string, () => boolean>;
}

/**
 * The observability a service is handed with its deps: its own tracer (from
 * `telemetry.tracer(name)`, so its spans carry its own `service.name` even when several services
 * share a process) and the process's metrics (served on `/metrics`). Both optional: without them
 * the global tracer is used and nothing is counted.
 */
export interface ServiceTelemetry {
  /** The service's tracer. @default the globally registered tracer provider's */
  tracer?: Tracer;
  /** The process's metrics. */
  metrics?: ParleyMetrics;
}

/**
 * The version in the `package.json` of the package that holds `moduleUrl` (pass `import.meta.url`):
 * the nearest one above the module, so the answer is the same from `src/` (tests) and `dist/`.
 */
export function packageVersion(moduleUrl: string): string {
  let dir = dirname(fileURLToPath(moduleUrl));
  for (;;) {
    const candidate = join(dir, 'package.json');
    if (existsSync(candidate)) {
      const { version } = JSON.parse(readFileSync(candidate, 'utf8')) as { version?: unknown };
      if (typeof version !== 'string') throw new Error(`${candidate} has no version`);
      return version;
    }
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`no package.json above ${moduleUrl}`);
    dir = parent;
  }
}

/**
 * The connection a service receives and answers requests on, next to its `nc` (which writes streams
 * and buckets and makes the service's own requests). Deployments give it the service's **responder**
 * creds (`mintResponderCreds`: publish `_INBOX.>` only), so a reply can never write anything but a
 * reply, whatever reply subject a caller names. Without it, requests are answered on `nc` — still
 * only to the caller's own `_INBOX.<caller>.` (kit `respondTo`), but without the server's backstop.
 */
export interface ServiceResponder {
  /** @default nc */
  responder?: NatsConnection | undefined;
}
