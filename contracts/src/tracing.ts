/**
 * W3C trace context on NATS, and the span vocabulary every Parley hop uses (OpenTelemetry messaging
 * semantic conventions plus `parley.*` attributes).
 *
 * `@opentelemetry/api` is an optional peer dependency: when it is not installed every function here
 * degrades to a cheap no-op, and when it is installed without an SDK registered the API itself is a
 * no-op. Nothing here ever throws because of telemetry.
 */
import { type MsgHdrs, headers as natsHeaders } from '@nats-io/nats-core';
import type * as Api from '@opentelemetry/api';
import type {
  Attributes,
  Context,
  Link,
  Span,
  SpanKind,
  TextMapGetter,
  TextMapSetter,
  Tracer,
} from '@opentelemetry/api';
import { type ErrorCode, isParleyError } from './errors.js';
import { headerNames, headerOf } from './headers.js';

export type { Attributes, Context, Link, Span, SpanKind, Tracer } from '@opentelemetry/api';

// An optional peer dependency cannot be imported statically: a process without it would fail to
// load contracts at all. The dynamic import resolves once, at module evaluation.
const api: typeof Api | undefined = await import('@opentelemetry/api').catch(() => undefined);

/** The OpenTelemetry API when `@opentelemetry/api` is installed, else undefined. */
export const otelApi: typeof Api | undefined = api;

/** Attribute names Parley spans carry. Messaging ones follow the OpenTelemetry conventions. */
export const traceAttributes = {
  /** Always `nats`. */
  messagingSystem: 'messaging.system',
  /** The subject published to or received from. */
  destination: 'messaging.destination.name',
  /** The subject with its variable tokens named, e.g. `parley.in.{participant}.api.rooms.create`. */
  destinationTemplate: 'messaging.destination.template',
  /** The fan-out partition of a room-log subject. */
  partition: 'messaging.destination.partition.id',
  /** `create`, `send`, `receive`, `process` or `settle`. */
  operationType: 'messaging.operation.type',
  /** NATS-specific verb: `request`, `publish`, `process`, `fanout`, `deliver`, … */
  operationName: 'messaging.operation.name',
  /** Parley message id (`msg_…`), or the JetStream `Nats-Msg-Id`. */
  messageId: 'messaging.message.id',
  /** The room a message belongs to. */
  conversationId: 'messaging.message.conversation_id',
  /** Payload size in bytes. */
  bodySize: 'messaging.message.body.size',
  /** Queue group (services) or durable consumer name (inboxes). */
  consumerGroup: 'messaging.consumer.group.name',
  /** Times JetStream delivered this message (> 1 is a redelivery). */
  deliveryCount: 'messaging.nats.delivery_count',
  /** The error class of a failed operation: the Parley error code. */
  errorType: 'error.type',
  /** `<service>.<method>` of a request/reply API call. */
  apiMethod: 'parley.api.method',
  /** The authenticated caller (the `<id>` of `parley.in.<id>.…`). */
  caller: 'parley.caller',
  /** The Parley error code of a refusal or failure. */
  errorCode: 'parley.error.code',
  roomId: 'parley.room.id',
  sender: 'parley.sender',
  recipient: 'parley.recipient',
  /** Sequence of the message in the room log. */
  roomSeq: 'parley.room.seq',
  /** The human principal a delegated request acts for. */
  onBehalfOf: 'parley.on_behalf_of',
  /** A policy decision: `allow` or `deny`. */
  decision: 'parley.decision',
  /** GenAI conventions, for tool calls. */
  genAiOperation: 'gen_ai.operation.name',
  toolName: 'gen_ai.tool.name',
  toolCallId: 'gen_ai.tool.call.id',
} as const;

/** The values of `messaging.operation.type`. */
export type MessagingOperation = 'create' | 'send' | 'receive' | 'process' | 'settle';

/** NATS message headers, structurally (nats.js `MsgHdrs` satisfies it). */
export interface TraceCarrier {
  get(key: string, match?: 'exact' | 'canonical' | 'insensitive'): string;
  set(key: string, value: string): void;
  keys(): string[];
}

/** Reads W3C headers from NATS headers; a bridge that changed the key's case is still understood. */
export const natsHeadersGetter: TextMapGetter<TraceCarrier> = {
  keys: (carrier) => carrier.keys(),
  get(carrier, key) {
    // Most lookups are for a header that is absent (tracestate, baggage): the case-insensitive
    // search only runs when some key has the length of the one asked for.
    const value =
      headerOf(carrier, key) ??
      (carrier.keys().some((k) => k.length === key.length) ? carrier.get(key, 'insensitive') : '');
    return value === '' ? undefined : value;
  },
};

/** Writes W3C headers into NATS headers. */
export const natsHeadersSetter: TextMapSetter<TraceCarrier> = {
  set: (carrier, key, value) => carrier.set(key, value),
};

// Creates the headers on the first key the propagator writes, so a request with nothing to
// propagate (tracing off) allocates no headers at all.
const lazySetter: TextMapSetter<{ headers: MsgHdrs | undefined }> = {
  set(holder, key, value) {
    holder.headers ??= natsHeaders();
    holder.headers.set(key, value);
  },
};

/** A context that holds nothing: what extraction returns when `@opentelemetry/api` is absent. */
const EMPTY_CONTEXT: Context = {
  getValue: () => undefined,
  setValue() {
    return this;
  },
  deleteValue() {
    return this;
  },
};

/**
 * Writes the trace context of `ctx` (default: the active one) into `headers` as `traceparent`,
 * `tracestate` and `baggage`. Returns the headers, created when `headers` is absent and there is
 * something to propagate; returns `headers` unchanged (possibly undefined) when there is nothing.
 */
export function injectContext(headers?: MsgHdrs, ctx?: Context): MsgHdrs | undefined {
  if (!api) return headers;
  const holder = { headers };
  api.propagation.inject(ctx ?? api.context.active(), holder, lazySetter);
  return holder.headers;
}

/**
 * Reads the trace context in `headers` into a context derived from `ctx` (default: the active one).
 * Without trace headers, returns `ctx` itself.
 */
export function extractContext(headers: TraceCarrier | undefined, ctx?: Context): Context {
  if (!api) return ctx ?? EMPTY_CONTEXT;
  const base = ctx ?? api.context.active();
  if (!headers) return base;
  return api.propagation.extract(base, headers, natsHeadersGetter);
}

/** The W3C fields a message body can carry (the `trace` field of a room message). */
export interface TraceFields {
  traceparent: string;
  tracestate?: string;
}

/** The trace context of `ctx` (default: the active one) as body fields, or undefined when none. */
export function traceFieldsOf(ctx?: Context): TraceFields | undefined {
  if (!api) return undefined;
  const carrier: Record<string, string> = {};
  api.propagation.inject(ctx ?? api.context.active(), carrier);
  const traceparent = carrier[headerNames.traceparent];
  if (!traceparent) return undefined;
  const tracestate = carrier[headerNames.tracestate];
  return tracestate ? { traceparent, tracestate } : { traceparent };
}

/** The context a message body's trace fields describe (e.g. a room-log entry read from history). */
export function contextFromTraceFields(fields: TraceFields | undefined, ctx?: Context): Context {
  if (!api) return ctx ?? EMPTY_CONTEXT;
  const base = ctx ?? api.context.active();
  if (!fields) return base;
  return api.propagation.extract(base, { ...fields });
}

/** The trace and span id of the active span (for log lines and audit records), or undefined. */
export function activeTraceIds(ctx?: Context): { traceId: string; spanId: string } | undefined {
  if (!api) return undefined;
  const sc = api.trace.getSpanContext(ctx ?? api.context.active());
  if (!sc || !api.isSpanContextValid(sc)) return undefined;
  return { traceId: sc.traceId, spanId: sc.spanId };
}

/**
 * The tracer `@parley/contracts` and the SDK use when none is given: the globally registered
 * provider's. Looked up on each call (a map lookup in the SDK): a cached proxy would keep using a
 * provider that was shut down and replaced.
 */
export function defaultTracer(): Tracer | undefined {
  return api?.trace.getTracer('@parley/contracts');
}

/** Options of {@link startMessagingSpan}. */
export interface MessagingSpanOptions {
  /** `messaging.operation.type`. */
  operation: MessagingOperation;
  /** `messaging.operation.name` and the span name's first word, e.g. `publish`, `fanout`. @default operation */
  operationName?: string;
  /** The subject. */
  destination: string;
  /**
   * What the span name says after the operation: a low-cardinality name such as `rooms.create`,
   * `room`, `inbox`. @default destination
   */
  target?: string;
  /** `messaging.destination.template`. */
  destinationTemplate?: string;
  /** Payload size in bytes. */
  bodySize?: number;
  /** More attributes (`traceAttributes.roomId`, …). */
  attributes?: Attributes;
  /** The span kind. @default PRODUCER for create/send, CONSUMER for receive/process, CLIENT for settle */
  kind?: SpanKind;
  /** The parent context (e.g. from {@link extractContext}). @default the active context */
  parent?: Context;
  /** Links, e.g. to the producer spans of a batch. */
  links?: Link[];
}

const KIND_OF: Record<MessagingOperation, 'PRODUCER' | 'CONSUMER' | 'CLIENT'> = {
  create: 'PRODUCER',
  send: 'PRODUCER',
  receive: 'CONSUMER',
  process: 'CONSUMER',
  settle: 'CLIENT',
};

/**
 * Starts a span named `<operationName> <target>` with the messaging attributes, as a child of
 * `parent` (default: the active context). Attributes are only computed when the span records, so a
 * process without tracing pays for one non-recording span object. Undefined without the API.
 */
export function startMessagingSpan(tracer: Tracer | undefined, o: MessagingSpanOptions): Span | undefined {
  if (!api || !tracer) return undefined;
  const opName = o.operationName ?? o.operation;
  const span = tracer.startSpan(
    `${opName} ${o.target ?? o.destination}`,
    { kind: o.kind ?? api.SpanKind[KIND_OF[o.operation]], ...(o.links ? { links: o.links } : {}) },
    o.parent ?? api.context.active(),
  );
  if (span.isRecording()) {
    span.setAttributes({
      [traceAttributes.messagingSystem]: 'nats',
      [traceAttributes.destination]: o.destination,
      [traceAttributes.operationType]: o.operation,
      [traceAttributes.operationName]: opName,
      ...(o.destinationTemplate ? { [traceAttributes.destinationTemplate]: o.destinationTemplate } : {}),
      ...(o.bodySize !== undefined ? { [traceAttributes.bodySize]: o.bodySize } : {}),
      ...o.attributes,
    });
  }
  return span;
}

/**
 * Starts an `execute_tool <name>` span (GenAI conventions) under the active context: what the SDK
 * opens around a handler's tool call.
 */
export function startToolSpan(
  tracer: Tracer | undefined,
  name: string,
  attributes: Attributes = {},
): Span | undefined {
  if (!api || !tracer) return undefined;
  const span = tracer.startSpan(`execute_tool ${name}`, { kind: api.SpanKind.INTERNAL });
  if (span.isRecording()) {
    span.setAttributes({
      [traceAttributes.genAiOperation]: 'execute_tool',
      [traceAttributes.toolName]: name,
      ...attributes,
    });
  }
  return span;
}

/**
 * Marks `span` as failed: status ERROR, `parley.error.code` and `error.type` set to the error's
 * code (`INTERNAL` for anything that is not a ParleyError, whose exception is recorded too).
 */
export function recordSpanError(span: Span | undefined, err: unknown): void {
  if (!span || !api || !span.isRecording()) return;
  const code: ErrorCode = isParleyError(err) ? err.code : 'INTERNAL';
  span.setAttribute(traceAttributes.errorCode, code);
  span.setAttribute(traceAttributes.errorType, code);
  if (!isParleyError(err)) span.recordException(err instanceof Error ? err : String(err));
  span.setStatus({
    code: api.SpanStatusCode.ERROR,
    message: isParleyError(err) ? `${code}: ${err.message}` : code,
  });
}

/**
 * Runs `fn` with `span` active (children and injected headers point at it, log lines carry its
 * ids), records a thrown error on it, and ends it. With no span, just runs `fn`; so too with a span
 * that neither records nor carries a trace (no tracer provider and no trace to continue) under the
 * context already active: entering a context for it passes nothing on, and costs a context object
 * and a promise per call (an SDK send, a delivery).
 */
export function runInSpan<T>(span: Span | undefined, fn: () => Promise<T>, parent?: Context): Promise<T> {
  if (!span || !api) return fn();
  if (
    !span.isRecording() &&
    !api.isSpanContextValid(span.spanContext()) &&
    (parent === undefined || parent === api.context.active())
  )
    return fn();
  return runEntered(api, span, fn, parent);
}

async function runEntered<T>(
  api: typeof Api,
  span: Span,
  fn: () => Promise<T>,
  parent: Context | undefined,
): Promise<T> {
  try {
    return await api.context.with(api.trace.setSpan(parent ?? api.context.active(), span), fn);
  } catch (err) {
    recordSpanError(span, err);
    throw err;
  } finally {
    span.end();
  }
}
