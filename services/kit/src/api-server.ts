import { type Msg, type MsgHdrs, headers as natsHeaders } from '@nats-io/transport-node';
import {
  type ApiAccess,
  type ApiMethod,
  type ApiParsedRequest,
  type ApiResponse,
  callerOf,
  decodeJson,
  encodeJson,
  errorCodes,
  headerNames,
  isParleyError,
  isParticipantId,
  isServiceId,
  limits,
  ParleyError,
} from '@parley/contracts';
import type { Logger } from 'pino';
import type { Endpoint, MicroService } from './micro.js';

/** What a handler knows about the request besides its body. */
export interface RequestContext {
  /** The authenticated caller: the `<id>` of `parley.in.<id>.…`. */
  caller: string;
  subject: string;
  headers: MsgHdrs | undefined;
  log: Logger;
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

/** Sends an error reply: the code in `Parley-Error`, an ErrorEnvelope body. */
export function respondError(msg: Msg, err: ParleyError): void {
  if (!msg.reply) return;
  const h = natsHeaders();
  h.set(headerNames.error, err.code);
  h.set(headerNames.serviceError, err.message.slice(0, 256).replaceAll(/[\r\n]/g, ' '));
  h.set(headerNames.serviceErrorCode, String(errorCodes[err.code].status));
  msg.respond(encodeJson(err.toEnvelope()), { headers: h });
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
}

/**
 * Serves a service's API methods from one subscription on `parley.in.*.api.<service>.*`: checks the
 * caller's access, decodes and validates the request (an oversized, non-JSON, wrongly typed or
 * unknown-method request gets its error code, never a crash or a timeout), runs the handler, and
 * replies. Each method has its own endpoint stats.
 */
export function serveApis(micro: MicroService, bindings: ApiBinding[], options: ServeApisOptions): void {
  const routes = new Map<string, { binding: ApiBinding; endpoint: Endpoint; log: Logger }>();
  for (const binding of bindings) {
    const m = binding.method;
    if (m.service !== options.service)
      throw new Error(`${m.service}.${m.method} is not a ${options.service} method`);
    routes.set(m.method, {
      binding,
      endpoint: micro.endpoint({
        name: `${m.service}.${m.method}`,
        subject: m.listen,
        queue: options.queue,
        metadata: { access: m.access },
      }),
      log: options.log.child({ api: `${m.service}.${m.method}` }),
    });
  }
  const unknown = micro.endpoint({
    name: `${options.service}.unknown`,
    subject: `parley.in.*.api.${options.service}.*`,
    queue: options.queue,
    metadata: { purpose: 'answers unknown methods with NOT_FOUND' },
  });
  const maxBytes = options.maxBytes ?? limits.maxRequestBytes;
  micro.subscribe(`parley.in.*.api.${options.service}.*`, options.queue, (msg) => {
    const name = msg.subject.slice(msg.subject.lastIndexOf('.') + 1);
    const route = routes.get(name);
    if (!route) {
      unknown.run(async () => {
        const e = new ParleyError('NOT_FOUND', `${options.service} has no method ${name}`, {
          details: { methods: [...routes.keys()] },
        });
        respondError(msg, e);
        return `${e.code}: ${e.message}`;
      });
      return;
    }
    const { binding, endpoint, log } = route;
    endpoint.run(async () => {
      try {
        const caller = callerOf(msg.subject);
        checkAccess(binding.method.access, caller);
        const request = decodeJson(binding.method.request, msg.data, {
          maxBytes,
          what: `${binding.method.method} request`,
        });
        const response = await binding.handler(request, {
          caller,
          subject: msg.subject,
          headers: msg.headers,
          log,
        });
        if (msg.reply) msg.respond(encodeJson(response));
        return undefined;
      } catch (err) {
        const e = toParleyError(err, log);
        respondError(msg, e);
        return `${e.code}: ${e.message}`;
      }
    });
  });
}
