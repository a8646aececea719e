import { activeTraceIds } from '@parley/contracts';
import { type Logger, type LoggerOptions, pino } from 'pino';

export type { Logger } from 'pino';

/** Options of {@link createLogger}. */
export interface CreateLoggerOptions {
  /** The process's name, e.g. `parley-rooms`. */
  name: string;
  /** pino level. @default info */
  level?: string;
  /** Where to write (tests pass a stream). @default stdout */
  destination?: NodeJS.WritableStream;
  /** Fields added to every line. */
  base?: Record<string, unknown>;
}

/**
 * Adds `trace_id` and `span_id` of the active span to a log line (nothing outside a trace), so a
 * line can be found from a trace in Jaeger and the trace from the line.
 */
export function traceMixin(): Record<string, string> {
  const ids = activeTraceIds();
  return ids ? { trace_id: ids.traceId, span_id: ids.spanId } : {};
}

/**
 * The one root logger of a process; components take `log.child({ component })`. Lines written
 * while a span is active carry its `trace_id` and `span_id`.
 */
export function createLogger(options: CreateLoggerOptions): Logger {
  const opts: LoggerOptions = {
    name: options.name,
    level: options.level ?? 'info',
    base: { pid: process.pid, ...options.base },
    timestamp: pino.stdTimeFunctions.isoTime,
    mixin: traceMixin,
  };
  return options.destination ? pino(opts, options.destination as pino.DestinationStream) : pino(opts);
}

/** A logger that writes nothing. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
