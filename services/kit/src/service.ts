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
