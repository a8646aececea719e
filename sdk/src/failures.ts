/**
 * Failures the SDK cannot throw at its caller because nobody awaits them: a handler that threw (the
 * delivery is retried), the delivery engine's own errors, a tool-call outcome governance did not
 * receive, a presence heartbeat that did not go out. Given to `connect({ onError })` and/or
 * `connect({ logger })`; silent when neither is given.
 */

/** Where a failure happened. */
export type FailureSource = 'handler' | 'delivery' | 'tool_audit' | 'presence';

/** What the SDK says about a failure, besides the error itself. */
export interface Failure {
  source: FailureSource;
  /** The participant whose connection it happened on. */
  participant: string;
  /** Specifics: the tool call id of a dropped audit record, the room of a delivery. */
  details?: Record<string, unknown>;
}

/** A logger the SDK can write to: pino's, or anything with the same `warn(obj, msg)`. */
export interface SdkLogger {
  warn(obj: Record<string, unknown>, msg: string): void;
}

/** Receives the failures of a connection; see {@link Failure}. */
export type ErrorListener = (err: unknown, failure: Failure) => void;

/** Options of `connect` that say where failures go. */
export interface FailureOptions {
  /** Called with every failure nobody awaits. Never throws at the SDK (a throw is ignored). */
  onError?: ErrorListener;
  /** Where failures are logged at warn level. @default nowhere: the SDK is silent */
  logger?: SdkLogger;
}

/** @internal How the SDK's parts report a failure. */
export type ReportFailure = (err: unknown, source: FailureSource, details?: Record<string, unknown>) => void;

/** @internal The reporter of a connection: to the listener and the logger, never throwing. */
export function failureReporter(participant: string, o: FailureOptions): ReportFailure {
  const { onError, logger } = o;
  if (!onError && !logger) return () => undefined;
  return (err, source, details) => {
    const failure: Failure = { source, participant, ...(details ? { details } : {}) };
    try {
      onError?.(err, failure);
    } catch {
      // A listener that throws must not break delivery or heartbeats.
    }
    try {
      logger?.warn(
        { err: err instanceof Error ? err.message : String(err), source, participant, ...details },
        `parley sdk: ${source} failed`,
      );
    } catch {
      // Same for a logger.
    }
  };
}
