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

/** The one root logger of a process; components take `log.child({ component })`. */
export function createLogger(options: CreateLoggerOptions): Logger {
  const opts: LoggerOptions = {
    name: options.name,
    level: options.level ?? 'info',
    base: { pid: process.pid, ...options.base },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return options.destination ? pino(opts, options.destination as pino.DestinationStream) : pino(opts);
}

/** A logger that writes nothing. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
