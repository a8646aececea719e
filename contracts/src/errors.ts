import * as z from 'zod';
import { named } from './registry-of-schemas.js';

/**
 * Every error code Parley returns, with its meaning and the HTTP status the gateway maps it to.
 * Codes are stable: clients branch on them. `docs/errors.md` is generated from this table.
 */
export const errorCodes = {
  INVALID_ARGUMENT: {
    status: 400,
    message: 'The request is malformed, has a wrong type, or a field is out of range.',
  },
  UNAUTHENTICATED: {
    status: 401,
    message: 'The caller could not be identified: missing, forged or expired credentials or token.',
  },
  PERMISSION_DENIED: {
    status: 403,
    message: 'The caller is known but may not do this (role, scope, ownership or policy).',
  },
  NOT_FOUND: {
    status: 404,
    message: 'The named object does not exist, or the caller may not know that it exists.',
  },
  CONFLICT: {
    status: 409,
    message: 'The request conflicts with the current state (a stale revision, a duplicate name).',
  },
  HISTORY_EXPIRED: {
    status: 410,
    message:
      'The history position asked for is older than what the room log retains: details.retainedFrom is where retained history starts.',
  },
  NOT_A_MEMBER: {
    status: 403,
    message: 'The caller is not a member of the room (or may not send there, as an observer).',
  },
  ROOM_CLOSED: {
    status: 409,
    message: 'The room is closed: nothing can be sent to it and nobody can be invited.',
  },
  NO_CONSENT: {
    status: 403,
    message: 'The two parties are not contacts: bilateral consent is required first.',
  },
  BLOCKED: {
    status: 403,
    message: 'The other party blocked the caller: no further contact requests are accepted.',
  },
  SUSPENDED: {
    status: 403,
    message: 'The agent (or one in its delegation chain) is suspended by its owner or an admin.',
  },
  REVOKED: {
    status: 401,
    message: 'The credentials or the delegation token were revoked.',
  },
  EXPIRED: {
    status: 401,
    message: 'The token or request expired.',
  },
  RATE_LIMITED: {
    status: 429,
    message: 'Too many requests: retry after the time given in retryAfterMs.',
  },
  BUDGET_EXCEEDED: {
    status: 402,
    message: 'A token or cost budget is exhausted for this agent, owner or room.',
  },
  HOP_LIMIT: {
    status: 508,
    message: 'The message is too many hops away from the human who started the conversation.',
  },
  ROOM_PAUSED: {
    status: 423,
    message: 'The room is paused for agents (runaway detector or an admin); a human can resume it.',
  },
  PAYLOAD_TOO_LARGE: {
    status: 413,
    message: 'The request or message is larger than the configured limit.',
  },
  UNAVAILABLE: {
    status: 503,
    message: 'A backing service or the NATS server is not reachable right now; retry with backoff.',
  },
  DEADLINE_EXCEEDED: {
    status: 504,
    message: 'The operation did not finish in time; it may still complete, retry idempotently.',
  },
  ILLEGAL_TRANSITION: {
    status: 409,
    message: 'The task state machine does not allow this transition from the task’s current state.',
  },
  TASK_CLOSED: {
    status: 409,
    message:
      'The task is final (completed, failed, canceled or rejected): nothing more can be done under it.',
  },
  APPROVAL_REQUIRED: {
    status: 428,
    message: 'Org policy holds this call for a person’s approval: ask for it (the SDK does) and wait.',
  },
  APPROVAL_DENIED: {
    status: 403,
    message: 'The approver said no: the held call does not run (the reason says why).',
  },
  APPROVAL_TIMEOUT: {
    status: 408,
    message: 'Nobody answered the approval request before it expired: the held call does not run.',
  },
  INTERNAL: {
    status: 500,
    message: 'An unexpected error inside Parley; it was logged with the trace id.',
  },
} as const satisfies Record<string, { status: number; message: string }>;

/** One of Parley's stable error codes. */
export type ErrorCode = keyof typeof errorCodes;

/**
 * True when `code` is one of Parley's error codes. An own-property test: `in` would also accept
 * names inherited from `Object.prototype` such as `constructor` or `toString`.
 */
export function isErrorCode(code: unknown): code is ErrorCode {
  return typeof code === 'string' && Object.hasOwn(errorCodes, code);
}

/** The list of error codes, in registry order. */
export const ERROR_CODES = Object.keys(errorCodes) as [ErrorCode, ...ErrorCode[]];

/** Schema of an error code. */
export const ErrorCodeSchema = named(
  'ErrorCode',
  z.enum(ERROR_CODES).describe('A stable Parley error code; see docs/errors.md.'),
);

/**
 * The body of every error reply on NATS (with the code also in the `Parley-Error` header) and of
 * every error response at the HTTP gateway.
 */
export const ErrorEnvelope = named(
  'ErrorEnvelope',
  z
    .object({
      error: z.object({
        code: ErrorCodeSchema,
        message: z.string().describe('What went wrong, for a person.'),
        details: z
          .record(z.string(), z.unknown())
          .optional()
          .describe('Machine-readable specifics, e.g. the failing field or the missing consent.'),
        retryAfterMs: z.int().min(0).optional().describe('For RATE_LIMITED and UNAVAILABLE.'),
      }),
    })
    .describe('An error reply.'),
);
export type ErrorEnvelope = z.infer<typeof ErrorEnvelope>;

/** Options of a {@link ParleyError}. */
export interface ParleyErrorOptions extends ErrorOptions {
  /** Machine-readable specifics (the field that failed, what consent is missing, …). */
  details?: Record<string, unknown>;
  /** When to retry, for `RATE_LIMITED` and `UNAVAILABLE`. */
  retryAfterMs?: number;
}

/** An error with a stable {@link ErrorCode}. Test it with {@link isParleyError}, not `instanceof`. */
export class ParleyError extends Error {
  /** The stable code. */
  readonly code: ErrorCode;
  /** Machine-readable specifics. */
  readonly details?: Record<string, unknown>;
  /** When to retry, if the code says retrying helps. */
  readonly retryAfterMs?: number;

  constructor(code: ErrorCode, message?: string, options: ParleyErrorOptions = {}) {
    super(message ?? errorCodes[code].message, options);
    this.name = 'ParleyError';
    this.code = code;
    if (options.details !== undefined) this.details = options.details;
    if (options.retryAfterMs !== undefined) this.retryAfterMs = options.retryAfterMs;
  }

  /** The envelope sent on the wire. */
  toEnvelope(): ErrorEnvelope {
    return {
      error: {
        code: this.code,
        message: this.message,
        ...(this.details ? { details: this.details } : {}),
        ...(this.retryAfterMs !== undefined ? { retryAfterMs: this.retryAfterMs } : {}),
      },
    };
  }

  /** Rebuilds the error a remote side sent. */
  static fromEnvelope(envelope: ErrorEnvelope): ParleyError {
    const { code, message, details, retryAfterMs } = envelope.error;
    return new ParleyError(code, message, {
      ...(details ? { details } : {}),
      ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
    });
  }
}

/**
 * True when `err` carries a Parley error code (optionally a given one). Works across package copies
 * and process boundaries, where `instanceof` does not.
 */
export function isParleyError(err: unknown, code?: ErrorCode): err is ParleyError {
  if (typeof err !== 'object' || err === null) return false;
  const c = (err as { code?: unknown }).code;
  if (!isErrorCode(c)) return false;
  return code === undefined || c === code;
}

/**
 * Turns a zod validation failure into an `INVALID_ARGUMENT` error whose message names each bad
 * field, e.g. `parts.0.text: expected string, received number`.
 */
export function invalidArgument(error: z.ZodError, what = 'request'): ParleyError {
  const issues = error.issues.slice(0, 10).map((i) => ({
    path: i.path.map(String).join('.') || '(root)',
    message: i.message,
  }));
  const text = issues.map((i) => `${i.path}: ${i.message}`).join('; ');
  return new ParleyError('INVALID_ARGUMENT', `invalid ${what}: ${text}`, { details: { issues } });
}
