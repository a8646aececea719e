import type { MsgHdrs } from '@nats-io/nats-core';
import type * as z from 'zod';
import type { ApiMethod, ApiRequest, ApiResponse } from './api.js';
import { decodeJson, encodeJson } from './codec.js';
import { type StatusSource, timeLeftOnceConnected, watchConnection } from './connection.js';
import { ErrorEnvelope, isParleyError, ParleyError } from './errors.js';
import { headerNames } from './headers.js';
import {
  defaultTracer,
  injectContext,
  otelApi,
  recordSpanError,
  type Tracer,
  traceAttributes,
} from './tracing.js';

/** The part of a NATS reply Parley reads. */
export interface ReplyMsg {
  data: Uint8Array;
  headers?: { get(key: string): string } | undefined;
}

/**
 * What {@link request} needs of a NATS connection (structurally, so contracts need no NATS client).
 * With `status` and `isClosed` (a nats.js connection has them) a request made while the connection
 * reconnects waits for it within its timeout instead of being dropped (see connection.ts).
 */
export interface Requester extends Partial<StatusSource> {
  request(
    subject: string,
    payload?: Uint8Array,
    opts?: { timeout: number; headers?: MsgHdrs },
  ): Promise<ReplyMsg>;
}

/** Options of {@link request}. */
export interface RequestOptions {
  /** Milliseconds to wait for the reply. @default 5000 */
  timeout?: number;
  /** NATS headers to send. The trace context is added to them (or to new ones). */
  headers?: MsgHdrs;
  /** Largest reply accepted, in bytes. @default 8 MiB */
  maxReplyBytes?: number;
  /**
   * The tracer of the client span. Services pass their own (so the span carries their
   * `service.name`). @default the globally registered tracer provider's `@parley/contracts` tracer
   */
  tracer?: Tracer;
}

/**
 * Decodes a reply: an error reply (the `Parley-Error` header) becomes a thrown {@link ParleyError},
 * anything else is validated with `schema`.
 */
export function decodeReply<S extends z.ZodType>(schema: S, msg: ReplyMsg, what = 'reply'): z.output<S> {
  const code = msg.headers?.get(headerNames.error);
  if (code) {
    let envelope: ErrorEnvelope;
    try {
      envelope = decodeJson(ErrorEnvelope, msg.data, { what: 'error reply' });
    } catch {
      envelope = {
        error: {
          code: isParleyError({ code }) ? (code as ErrorEnvelope['error']['code']) : 'INTERNAL',
          message: code,
        },
      };
    }
    throw ParleyError.fromEnvelope(envelope);
  }
  return decodeJson(schema, msg.data, { what, maxBytes: 8 * 1024 * 1024 });
}

/**
 * Turns what a NATS request can throw into a {@link ParleyError}: no responders → `UNAVAILABLE`
 * (the service is not running), timeout → `DEADLINE_EXCEEDED`, permissions → `PERMISSION_DENIED`.
 */
export function requestFailure(err: unknown, subject: string): ParleyError {
  if (isParleyError(err)) return err;
  const names: string[] = [];
  for (let e: unknown = err; e && typeof e === 'object' && names.length < 4; e = (e as Error).cause) {
    names.push((e as Error).name);
    if ((e as { isNoResponders?: () => boolean }).isNoResponders?.()) names.push('NoRespondersError');
  }
  if (names.includes('NoRespondersError')) {
    return new ParleyError('UNAVAILABLE', `nothing is serving ${subject}: is the service running?`, {
      cause: err,
      retryAfterMs: 1000,
    });
  }
  if (names.includes('TimeoutError')) {
    return new ParleyError('DEADLINE_EXCEEDED', `no reply on ${subject} in time`, { cause: err });
  }
  if (names.includes('PermissionViolationError')) {
    return new ParleyError('PERMISSION_DENIED', `the NATS server refused: ${(err as Error).message}`, {
      cause: err,
    });
  }
  if (names.some((n) => /Closed|Draining|Connection/.test(n))) {
    return new ParleyError('UNAVAILABLE', `NATS connection unavailable: ${(err as Error).message}`, {
      cause: err,
      retryAfterMs: 1000,
    });
  }
  return new ParleyError('INTERNAL', `request on ${subject} failed: ${(err as Error)?.message ?? err}`, {
    cause: err,
  });
}

/**
 * Calls an API method as `callerId` and returns its validated response, or throws a {@link ParleyError}.
 *
 * Traced as a CLIENT span `request <service>.<method>` (messaging conventions, `parley.api.method`,
 * `parley.caller`) whose context travels in the request headers, so the server's span is its child.
 * A refusal sets the span's status to ERROR with `parley.error.code`.
 */
export async function request<M extends ApiMethod>(
  nc: Requester,
  callerId: string,
  method: M,
  body: ApiRequest<M>,
  options: RequestOptions = {},
): Promise<ApiResponse<M>> {
  const subject = method.subject(callerId);
  const data = encodeJson(body);
  const api = otelApi;
  const tracer = options.tracer ?? defaultTracer();
  if (!api || !tracer) return send(nc, subject, data, method, options, options.headers);

  const name = `${method.service}.${method.method}`;
  const parent = api.context.active();
  const span = tracer.startSpan(`request ${name}`, { kind: api.SpanKind.CLIENT }, parent);
  // Attributes only when the span records: with tracing off this path allocates one no-op span.
  if (span.isRecording()) {
    span.setAttributes({
      [traceAttributes.messagingSystem]: 'nats',
      [traceAttributes.destination]: subject,
      [traceAttributes.destinationTemplate]: method.listen,
      [traceAttributes.operationType]: 'send',
      [traceAttributes.operationName]: 'request',
      [traceAttributes.bodySize]: data.length,
      [traceAttributes.apiMethod]: name,
      [traceAttributes.caller]: callerId,
    });
  }
  // Nothing to propagate (no trace, no baggage): skip building a context and touching headers.
  const propagate =
    api.isSpanContextValid(span.spanContext()) || api.propagation.getBaggage(parent) !== undefined;
  const headers = propagate
    ? injectContext(options.headers, api.trace.setSpan(parent, span))
    : options.headers;
  try {
    return await send(nc, subject, data, method, options, headers);
  } catch (err) {
    recordSpanError(span, err);
    throw err;
  } finally {
    span.end();
  }
}

async function send<M extends ApiMethod>(
  nc: Requester,
  subject: string,
  data: Uint8Array,
  method: M,
  options: RequestOptions,
  headers: MsgHdrs | undefined,
): Promise<ApiResponse<M>> {
  let reply: ReplyMsg;
  let timeout: number | undefined = options.timeout ?? 5000;
  if (nc.status && nc.isClosed) {
    timeout = await timeLeftOnceConnected(watchConnection(nc as StatusSource), timeout);
    if (timeout === undefined) {
      throw new ParleyError('UNAVAILABLE', `not connected to NATS: ${subject} was not sent`, {
        retryAfterMs: 1000,
      });
    }
  }
  try {
    reply = await nc.request(subject, data, { timeout, ...(headers ? { headers } : {}) });
  } catch (err) {
    throw requestFailure(err, subject);
  }
  return decodeReply(method.response, reply, `${method.service}.${method.method} reply`) as ApiResponse<M>;
}
