import { type Msg, type MsgHdrs, headers as natsHeaders } from '@nats-io/transport-node';
import {
  context,
  isSpanContextValid,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import {
  type ApiAccess,
  type ApiMethod,
  type ApiParsedRequest,
  type ApiResponse,
  callerOf,
  decodeJson,
  encodeJson,
  errorCodes,
  extractContext,
  headerNames,
  isParleyError,
  isParticipantId,
  isServiceId,
  limits,
  ParleyError,
  recordSpanError,
  subjects,
  traceAttributes,
} from '@parley/contracts';
import type { Logger } from 'pino';
import type { OkOrCode, ParleyMetrics } from './metrics.js';
import type { Endpoint, MicroService } from './micro.js';
import { type ReplyWatch, respondTo } from './reply.js';
import type { StandingView } from './standing.js';

/** What a handler knows about the request besides its body. */
export interface RequestContext {
  /** The authenticated caller: the `<id>` of `parley.in.<id>.…`. */
  caller: string;
  subject: string;
  headers: MsgHdrs | undefined;
  log: Logger;
  /**
   * The request's SERVER span (active while the handler runs: requests the handler makes are its
   * children, log lines carry its ids). Add domain attributes to it, e.g. `traceAttributes.roomId`.
   */
  span: Span;
}

/** Handles one API method: returns the response or throws a ParleyError. */
export type ApiHandler<M extends ApiMethod> = (
  request: ApiParsedRequest<M>,
  ctx: RequestContext,
) => Promise<ApiResponse<M>>;

/** Throws PERMISSION_DENIED unless `caller` may call a method with `access`. */
export function checkAccess(access: ApiAccess, caller: string): void {
  const ok =
    access === 'any'
      ? isParticipantId(caller) || isServiceId(caller)
      : access === 'service'
        ? isServiceId(caller)
        : access === 'human' || access === 'admin'
          ? caller.startsWith('usr_') || isServiceId(caller)
          : isParticipantId(caller) || isServiceId(caller);
  if (!ok) {
    throw new ParleyError(
      access === 'service' ? 'PERMISSION_DENIED' : 'UNAUTHENTICATED',
      `${caller} may not call this method (${access} only)`,
    );
  }
}

/**
 * Sends an error reply: the code in `Parley-Error`, an ErrorEnvelope body — only to the caller's
 * own reply prefix (see {@link respondTo}; `watch` counts and logs a refused one).
 */
export function respondError(msg: Msg, err: ParleyError, watch?: ReplyWatch): void {
  if (!msg.reply) return;
  const h = natsHeaders();
  h.set(headerNames.error, err.code);
  h.set(headerNames.serviceError, err.message.slice(0, 256).replaceAll(/[\r\n]/g, ' '));
  h.set(headerNames.serviceErrorCode, String(errorCodes[err.code].status));
  respondTo(msg, encodeJson(err.toEnvelope()), { headers: h, watch });
}

/**
 * Turns anything a handler threw into a ParleyError for the caller. Unknown errors become a generic
 * INTERNAL: their message stays in the log, never goes to the client.
 */
export function toParleyError(err: unknown, log: Logger): ParleyError {
  if (isParleyError(err)) return err as ParleyError;
  log.error({ err }, 'unexpected error while handling a request');
  return new ParleyError('INTERNAL');
}

/** One method and its handler, for {@link serveApis}. */
export interface ApiBinding {
  method: ApiMethod;
  // biome-ignore lint/suspicious/noExplicitAny: each binding pairs a method with its own handler type
  handler: ApiHandler<any>;
}

/** Pairs a method with its handler, keeping the handler's types tied to the method. */
export function bind<M extends ApiMethod>(method: M, handler: ApiHandler<M>): ApiBinding {
  return { method, handler };
}

/** Options of {@link serveApis}. */
export interface ServeApisOptions {
  /** The service name in subjects, e.g. `rooms`. */
  service: string;
  /** Queue group; every replica of a service uses the same one. */
  queue: string;
  log: Logger;
  /** Largest request accepted. @default limits.maxRequestBytes */
  maxBytes?: number;
  /** Tracer of the server spans: the service's own (`telemetry.tracer(name)`). @default the global tracer */
  tracer?: Tracer;
  /** Where each request's latency and result code are counted (`parley_api_*`). */
  metrics?: ParleyMetrics;
  /**
   * Participants' standing: a method whose `effect` is `write` is refused to a suspended, revoked or
   * over-budget participant before it runs (SUSPENDED, REVOKED, BUDGET_EXCEEDED). Every service passes
   * one (kit `createStandingView`); `'unchecked'` only where nothing a participant may call writes.
   */
  standing: StandingView | 'unchecked';
}

/**
 * Serves a service's API methods from one subscription on `parley.in.*.api.<service>.*`: checks the
 * caller's access, decodes and validates the request (an oversized, non-JSON, wrongly typed or
 * unknown-method request gets its error code, never a crash or a timeout), runs the handler, and
 * replies. Each method has its own endpoint stats.
 *
 * Each request is a SERVER span `process <service>.<method>` whose parent is the trace context in
 * the request headers; the handler runs inside it. A refusal sets the span's status to ERROR with
 * `parley.error.code`. Latency and result code go to `metrics`.
 */
export function serveApis(micro: MicroService, bindings: ApiBinding[], options: ServeApisOptions): void {
  interface Route {
    name: string;
    listen: string;
    endpoint: Endpoint;
    log: Logger;
    handle(msg: Msg, span: Span, log: Logger): Promise<void>;
  }
  const maxBytes = options.maxBytes ?? limits.maxRequestBytes;
  // Without a tracer of its own, the global provider's, looked up per request (it may be replaced).
  const tracerOf = () => options.tracer ?? trace.getTracer('@parley/kit');
  const metrics = options.metrics;
  const standing = options.standing === 'unchecked' ? undefined : options.standing;
  const routes = new Map<string, Route>();
  for (const binding of bindings) {
    const m = binding.method;
    if (m.service !== options.service)
      throw new Error(`${m.service}.${m.method} is not a ${options.service} method`);
    const name = `${m.service}.${m.method}`;
    routes.set(m.method, {
      name,
      listen: m.listen,
      endpoint: micro.endpoint({
        name,
        subject: m.listen,
        queue: options.queue,
        metadata: { access: m.access },
      }),
      log: options.log.child({ api: name }),
      async handle(msg, span, log) {
        const caller = callerOf(msg.subject);
        if (span.isRecording()) span.setAttribute(traceAttributes.caller, caller);
        checkAccess(m.access, caller);
        // Standing is checked here for every service: suspended means suspended everywhere.
        if (m.effect === 'write' && standing && isParticipantId(caller)) standing.check(caller);
        const request = decodeJson(m.request, msg.data, { maxBytes, what: `${m.method} request` });
        const response = await binding.handler(request, {
          caller,
          subject: msg.subject,
          headers: msg.headers,
          log,
          span,
        });
        respondTo(msg, encodeJson(response), { watch: { log, metrics } });
      },
    });
  }
  const listen = subjects.apiServiceListen(options.service);
  const unknown: Route = {
    name: `${options.service}.unknown`,
    listen,
    endpoint: micro.endpoint({
      name: `${options.service}.unknown`,
      subject: listen,
      queue: options.queue,
      metadata: { purpose: 'answers unknown methods with NOT_FOUND' },
    }),
    log: options.log,
    async handle(msg) {
      const name = msg.subject.slice(msg.subject.lastIndexOf('.') + 1);
      throw new ParleyError('NOT_FOUND', `${options.service} has no method ${name}`, {
        details: { methods: [...routes.keys()] },
      });
    },
  };
  micro.subscribe(listen, options.queue, (msg) => {
    const started = performance.now();
    const route = routes.get(msg.subject.slice(msg.subject.lastIndexOf('.') + 1)) ?? unknown;
    // The parent comes from the request alone, never from whatever context the connection's
    // socket callback happens to run in.
    const parent = extractContext(msg.headers, ROOT_CONTEXT);
    const span = tracerOf().startSpan(`process ${route.name}`, { kind: SpanKind.SERVER }, parent);
    if (span.isRecording()) {
      span.setAttributes({
        [traceAttributes.messagingSystem]: 'nats',
        [traceAttributes.destination]: msg.subject,
        [traceAttributes.destinationTemplate]: route.listen,
        [traceAttributes.operationType]: 'process',
        [traceAttributes.operationName]: 'process',
        [traceAttributes.consumerGroup]: options.queue,
        [traceAttributes.bodySize]: msg.data.length,
        [traceAttributes.apiMethod]: route.name,
      });
    }
    const handle = async () => {
      let code: OkOrCode = 'OK';
      try {
        await route.handle(msg, span, route.log);
        return undefined;
      } catch (err) {
        const e = toParleyError(err, route.log);
        code = e.code;
        recordSpanError(span, err);
        respondError(msg, e, { log: route.log, metrics });
        return `${e.code}: ${e.message}`;
      } finally {
        span.end();
        metrics?.observeApi(route.name, code, (performance.now() - started) / 1000);
      }
    };
    // The handler runs in the span's context, so what it calls joins the trace. A span that carries
    // no trace (a recording one always does), for a request that brought no context (no trace, no
    // baggage), leaves nothing to join: then no context is entered, when none is active already.
    // Entering one turns on Node 20's promise hooks for the whole process (the AsyncLocalStorage
    // context manager), a cost on every promise of the message path (4.7% of the rooms service's
    // allocations in `pnpm bench`).
    const enter =
      parent !== ROOT_CONTEXT || isSpanContextValid(span.spanContext()) || context.active() !== ROOT_CONTEXT;
    route.endpoint.run(() => (enter ? context.with(trace.setSpan(parent, span), handle) : handle()));
  });
}
