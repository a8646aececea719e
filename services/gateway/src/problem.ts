/**
 * Errors at the HTTP edge as RFC 9457 problem details (`application/problem+json`), carrying the
 * Parley code: the same refusal a NATS client gets, with the HTTP status the error registry gives
 * it. Anything that is not a ParleyError becomes a generic 500; its message stays in the log.
 */
import { type ErrorCode, errorCodes, isParleyError, ParleyError } from '@parley/contracts';
import type { Logger } from '@parley/kit';
import type { FastifyReply } from 'fastify';
import * as z from 'zod';

/** The problem document (for the OpenAPI document). */
export const Problem = z
  .object({
    type: z.string().describe('urn:parley:error:<CODE>'),
    title: z.string().describe('What the code means.'),
    status: z.int(),
    detail: z.string().describe('What happened in this case.'),
    code: z.string().describe('The stable Parley error code (docs/errors.md).'),
    details: z.record(z.string(), z.unknown()).optional(),
    retryAfterMs: z.int().optional(),
  })
  .describe('An RFC 9457 problem document carrying the Parley error code.');

/** Turns anything thrown into the ParleyError a client may see. */
export function toClientError(err: unknown, log: Logger): ParleyError {
  if (isParleyError(err)) return err;
  const fastifyCode = (err as { code?: unknown }).code;
  const status = (err as { statusCode?: unknown }).statusCode;
  if (fastifyCode === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    return new ParleyError('PAYLOAD_TOO_LARGE', 'the request body is larger than this gateway accepts');
  }
  if (fastifyCode === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
    return new ParleyError('INVALID_ARGUMENT', 'unsupported content type: send application/json');
  }
  if (typeof fastifyCode === 'string' && fastifyCode.startsWith('FST_ERR_CTP_')) {
    return new ParleyError('INVALID_ARGUMENT', 'the body is not valid JSON');
  }
  if (typeof status === 'number' && status >= 400 && status < 500) {
    return new ParleyError('INVALID_ARGUMENT', 'the request is malformed');
  }
  log.error({ err }, 'unexpected error at the gateway');
  return new ParleyError('INTERNAL');
}

/** Sends `err` as a problem document. */
export function sendProblem(reply: FastifyReply, err: ParleyError): FastifyReply {
  const code: ErrorCode = err.code;
  const status = errorCodes[code].status;
  if (status === 401) {
    void reply.header(
      'www-authenticate',
      `Bearer realm="parley", error="invalid_token", error_description="${code}"`,
    );
  }
  if (err.retryAfterMs !== undefined)
    void reply.header('retry-after', String(Math.ceil(err.retryAfterMs / 1000)));
  return reply
    .code(status)
    .header('content-type', 'application/problem+json; charset=utf-8')
    .send(
      JSON.stringify({
        type: `urn:parley:error:${code}`,
        title: errorCodes[code].message,
        status,
        detail: err.message,
        code,
        ...(err.details ? { details: err.details } : {}),
        ...(err.retryAfterMs !== undefined ? { retryAfterMs: err.retryAfterMs } : {}),
      }),
    );
}
