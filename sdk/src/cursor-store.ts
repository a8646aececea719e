import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import type { CursorStore } from './delivery.js';

/**
 * A {@link CursorStore} in a local file: the last handled room position per room, appended as a
 * line per handled message (synchronously, so it survives a crash) and compacted when opened. With
 * it, an agent that was away past its inbox cap notices the gap after a restart and backfills it.
 */
export function fileCursorStore(path: string): CursorStore {
  const positions = new Map<string, number>();
  try {
    for (const line of readFileSync(path, 'utf8').split('\n')) {
      const [room, seq] = line.split(' ');
      const n = Number(seq);
      if (room && Number.isInteger(n)) positions.set(room, Math.max(positions.get(room) ?? 0, n));
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  writeFileSync(path, [...positions].map(([room, seq]) => `${room} ${seq}\n`).join(''), { mode: 0o600 });
  return {
    get: (room) => positions.get(room),
    set(room, seq) {
      positions.set(room, seq);
      appendFileSync(path, `${room} ${seq}\n`);
    },
  };
}
