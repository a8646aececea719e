/**
 * The one place a Parley process starts OpenTelemetry. Three modes, from the standard `OTEL_*`
 * variables (see {@link telemetryEnv}):
 *
 * - `disabled` (`OTEL_SDK_DISABLED=true`): nothing is registered; the API stays a no-op.
 * - `propagate` (no exporter configured, the default): the AsyncLocalStorage context manager and
 *   the W3C trace-context + baggage propagators are registered, but no tracer provider. Spans are
 *   no-ops that carry the incoming context through unchanged, so a trace started upstream still
 *   reaches the next hop and log lines still carry its ids; nothing is recorded or exported.
 * - `export`: `@opentelemetry/sdk-node` runs the process-wide tracer provider (what the SDK/API
 *   path, e.g. `request()` without a tracer, uses), and each service gets a tracer of its own
 *   provider so its spans carry its own `service.name` even when several services share the
 *   process (the standalone backbone).
 *
 * Exporting is asynchronous (a batch processor with a bounded queue): a slow, dead or wrong
 * collector drops spans and logs a warning, it never delays or fails message handling.
 */

import type { ContextManager } from '@opentelemetry/api';
import { context, DiagLogLevel, diag, propagation, type Tracer, trace } from '@opentelemetry/api';
import type { Resource } from '@opentelemetry/resources';
import type {
  BatchSpanProcessorOptions,
  Sampler,
  SpanExporter,
  TracerProvider,
} from '@opentelemetry/sdk-trace';
import type { Logger } from 'pino';
import type { TelemetryConfig } from './config.js';

/** What a process does with traces; see the module comment. */
export type TelemetryMode = 'disabled' | 'propagate' | 'export';

/** Options of {@link startTelemetry}. */
export interface StartTelemetryOptions {
  /** The `OTEL_*` settings (a service's config, or {@link loadTelemetryConfig}). */
  config: TelemetryConfig;
  /** `service.name` of the process-wide provider when `OTEL_SERVICE_NAME` is unset, e.g. `parley-rooms`. */
  serviceName: string;
  /**
   * The service whose spans use the process-wide provider (a process that runs one service); every
   * other service gets a provider named `parley-<service>`. Unset: every service gets its own.
   */
  primaryService?: string;
  /** Where OpenTelemetry's own warnings (failed exports) go. */
  log: Logger;
  /** Batch span processor settings (tests shorten the delay). @default the SDK's: 5 s, 512 spans */
  batch?: Omit<BatchSpanProcessorOptions, 'exporter'>;
  /** How long {@link Telemetry.shutdown} waits for the last export. @default 2000 */
  shutdownTimeoutMs?: number;
  /** How long one export may take, retries included. @default OTEL_EXPORTER_OTLP_TIMEOUT, else 10 s */
  exportTimeoutMs?: number;
  /**
   * In `propagate` mode, start traces anyway — ids only: spans are sampled out, nothing is recorded
   * or exported — so a message that arrives without trace context still gets a trace id (for
   * `parley trace` and log lines). The local backbone sets it; a service alone leaves it off.
   * @default false
   */
  traceIdsWithoutExport?: boolean;
}

/** A started telemetry; `shutdown()` it last. */
export interface Telemetry {
  readonly mode: TelemetryMode;
  /** `service.name` of the process-wide provider. */
  readonly serviceName: string;
  /** Where spans go (`http://…/v1/traces`, `console`), undefined unless exporting. */
  readonly exportTo: string | undefined;
  /**
   * The tracer for `service` (e.g. `rooms`): its spans carry `service.name` `parley-<service>` (or
   * the process's name for the primary service). A no-op tracer unless exporting.
   */
  tracer(service: string): Tracer;
  /** Exports what is buffered now. Never rejects. */
  forceFlush(): Promise<void>;
  /** Flushes (bounded by `shutdownTimeoutMs`), stops every provider, unregisters the globals. Never rejects. */
  shutdown(): Promise<void>;
}

/** `service.name` of a Parley service. */
export function serviceNameOf(service: string): string {
  return `parley-${service}`;
}

/** The traces URL and protocol the configuration asks for, or undefined when nothing is exported. */
export function traceExportTarget(
  config: TelemetryConfig,
): { protocol: 'grpc' | 'http/protobuf' | 'http/json' | 'console'; url: string } | undefined {
  if (config.OTEL_SDK_DISABLED || config.OTEL_TRACES_EXPORTER === 'none') return undefined;
  if (config.OTEL_TRACES_EXPORTER === 'console') return { protocol: 'console', url: 'console' };
  const protocol = config.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? config.OTEL_EXPORTER_OTLP_PROTOCOL;
  if (config.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
    return { protocol, url: config.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT };
  const base = config.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (!base) return undefined;
  // The specification: a signal path is appended to the base endpoint for HTTP, not for gRPC.
  return { protocol, url: protocol === 'grpc' ? base : `${base.replace(/\/+$/, '')}/v1/traces` };
}

/** Parses `OTEL_RESOURCE_ATTRIBUTES` (`k=v,k2=v2`, values percent-encoded). */
export function parseResourceAttributes(value: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of value?.split(',') ?? []) {
    const i = pair.indexOf('=');
    if (i <= 0) continue;
    try {
      out[pair.slice(0, i).trim()] = decodeURIComponent(pair.slice(i + 1).trim());
    } catch {
      out[pair.slice(0, i).trim()] = pair.slice(i + 1).trim();
    }
  }
  return out;
}

// The API's globals belong to the process: only the first started telemetry registers them, and
// only it unregisters them when it stops.
let globalsOwner: object | undefined;

/** Starts telemetry for a process; see the module comment for what each mode does. */
export async function startTelemetry(o: StartTelemetryOptions): Promise<Telemetry> {
  const { config } = o;
  const serviceName = config.OTEL_SERVICE_NAME ?? o.serviceName;
  const noopTracer = (service: string) => trace.getTracer(`@parley/${service}`);
  if (config.OTEL_SDK_DISABLED) {
    return {
      mode: 'disabled',
      serviceName,
      exportTo: undefined,
      tracer: noopTracer,
      forceFlush: async () => undefined,
      shutdown: async () => undefined,
    };
  }

  const owner = {};
  const ownsGlobals = globalsOwner === undefined;
  if (ownsGlobals) {
    globalsOwner = owner;
    await registerGlobals(o.log);
  }
  const releaseGlobals = () => {
    if (globalsOwner !== owner) return;
    globalsOwner = undefined;
    trace.disable();
    propagation.disable();
    context.disable();
    diag.disable();
  };

  const target = traceExportTarget(config);
  if (!target) {
    if (o.traceIdsWithoutExport && ownsGlobals) {
      const sdkTrace = await import('@opentelemetry/sdk-trace');
      // Sampled out at the root, following a sampled parent: ids flow, nothing is kept.
      const sampler = new sdkTrace.ParentBasedSampler({ root: new sdkTrace.AlwaysOffSampler() });
      trace.setGlobalTracerProvider(new sdkTrace.TracerProvider({ sampler }));
    }
    return {
      mode: 'propagate',
      serviceName,
      exportTo: undefined,
      tracer: noopTracer,
      forceFlush: async () => undefined,
      shutdown: async () => releaseGlobals(),
    };
  }

  // Loaded only when exporting: the SDK and exporters cost ~0.3 s of startup that a process which
  // only propagates never pays.
  const [{ NodeSDK }, sdkTrace, resources] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/sdk-trace'),
    import('@opentelemetry/resources'),
  ]);
  const newExporter = await exporterFactory(target, sdkTrace, o.exportTimeoutMs);
  const sampler = samplerOf(config, sdkTrace);
  const base: Resource = resources
    .defaultResource()
    .merge(resources.detectResources({ detectors: [resources.hostDetector, resources.processDetector] }))
    .merge(
      resources.resourceFromAttributes({
        'service.namespace': 'parley',
        ...parseResourceAttributes(config.OTEL_RESOURCE_ATTRIBUTES),
      }),
    );
  const withName = (name: string) => base.merge(resources.resourceFromAttributes({ 'service.name': name }));
  const processor = () => new sdkTrace.BatchSpanProcessor({ ...o.batch, exporter: newExporter() });

  const primary = processor();
  const sdk = new NodeSDK({
    resource: withName(serviceName),
    autoDetectResources: false,
    sampler,
    spanProcessors: [primary],
    // Registered above, once per process, in every mode. The SDK's code reads null as "do not
    // register"; its types have not caught up.
    contextManager: null as unknown as ContextManager,
    textMapPropagator: null,
    // Metrics are prom-client's (/metrics); OTLP logs are not used: the SDK must not start them
    // from its environment defaults.
    metricReaders: [],
    logRecordProcessors: [],
    instrumentations: [],
  });
  sdk.start();

  const providers = new Map<string, TracerProvider>();
  const tracers = new Map<string, Tracer>();
  const tracerOf = (service: string): Tracer => {
    let t = tracers.get(service);
    if (t) return t;
    if (service === o.primaryService) {
      t = trace.getTracer(`@parley/${service}`);
    } else {
      const provider = new sdkTrace.TracerProvider({
        resource: withName(serviceNameOf(service)),
        sampler,
        spanProcessors: [processor()],
      });
      providers.set(service, provider);
      t = provider.getTracer(`@parley/${service}`);
    }
    tracers.set(service, t);
    return t;
  };
  const timeout = o.shutdownTimeoutMs ?? 2000;
  const bounded = (work: Promise<unknown>[]) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, timeout);
      timer.unref();
      void Promise.allSettled(work).then(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  let stopped = false;
  return {
    mode: 'export',
    serviceName,
    exportTo: target.protocol === 'console' ? 'console' : `${target.url} (${target.protocol})`,
    tracer: tracerOf,
    forceFlush: () => bounded([primary.forceFlush(), ...[...providers.values()].map((p) => p.forceFlush())]),
    async shutdown() {
      if (stopped) return;
      stopped = true;
      await bounded([sdk.shutdown(), ...[...providers.values()].map((p) => p.shutdown())]);
      releaseGlobals();
    },
  };
}

async function registerGlobals(log: Logger): Promise<void> {
  const [{ AsyncLocalStorageContextManager }, core] = await Promise.all([
    import('@opentelemetry/context-async-hooks'),
    import('@opentelemetry/core'),
  ]);
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(
    new core.CompositePropagator({
      propagators: [new core.W3CTraceContextPropagator(), new core.W3CBaggagePropagator()],
    }),
  );
  // OpenTelemetry reports failed exports through diag: one warning per distinct message a minute,
  // so a dead collector is visible without flooding the log.
  const olog = log.child({ component: 'otel' });
  const last = new Map<string, number>();
  const warn = (message: string, ...args: unknown[]) => {
    const now = Date.now();
    if ((last.get(message) ?? 0) > now - 60_000) return;
    last.set(message, now);
    olog.warn({ details: args.map((a) => (a instanceof Error ? a.message : a)) }, message);
  };
  const ignore = () => undefined;
  diag.setLogger(
    { error: warn, warn, info: ignore, debug: ignore, verbose: ignore },
    { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true },
  );
}

type SdkTrace = typeof import('@opentelemetry/sdk-trace');

function samplerOf(config: TelemetryConfig, t: SdkTrace): Sampler {
  const ratio = () => new t.TraceIdRatioBasedSampler(config.OTEL_TRACES_SAMPLER_ARG ?? 1);
  switch (config.OTEL_TRACES_SAMPLER) {
    case 'always_on':
      return new t.AlwaysOnSampler();
    case 'always_off':
      return new t.AlwaysOffSampler();
    case 'traceidratio':
      return ratio();
    case 'parentbased_always_off':
      return new t.ParentBasedSampler({ root: new t.AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new t.ParentBasedSampler({ root: ratio() });
    default:
      return new t.ParentBasedSampler({ root: new t.AlwaysOnSampler() });
  }
}

async function exporterFactory(
  target: NonNullable<ReturnType<typeof traceExportTarget>>,
  t: SdkTrace,
  timeoutMillis: number | undefined,
): Promise<() => SpanExporter> {
  const options = { url: target.url, ...(timeoutMillis ? { timeoutMillis } : {}) };
  switch (target.protocol) {
    case 'console':
      return () => new t.ConsoleSpanExporter();
    case 'http/json': {
      const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-http');
      return () => new OTLPTraceExporter(options);
    }
    case 'grpc': {
      const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-grpc');
      return () => new OTLPTraceExporter(options);
    }
    default: {
      const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-proto');
      return () => new OTLPTraceExporter(options);
    }
  }
}
