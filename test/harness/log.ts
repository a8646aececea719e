/** A logger whose lines a test reads back. */
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '@parley/kit';

/** A logger at `level` writing each JSON line into `lines`. */
export function capturingLogger(level = 'info'): { log: Logger; lines: string[] } {
  const lines: string[] = [];
  const log = createLogger({
    name: 'test',
    level,
    destination: new Writable({
      write(chunk, _encoding, done) {
        lines.push(String(chunk));
        done();
      },
    }),
  });
  return { log, lines };
}
