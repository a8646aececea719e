/**
 * A bridge's durable state: the source cursor (e.g. a Salesforce replay id) and the case rooms it
 * opened, in one JSON file written atomically (temporary file, fsync, rename). The bridge's own
 * state rather than a KV bucket: a bridge runs with participant creds, which may publish only under
 * `parley.in.<id>.>`, and giving bridges write access to a bucket would let one overwrite another's
 * cursor. In Kubernetes the file lives on the bridge's volume (see the Helm values).
 *
 * Order makes it exact: an event is stored in its room first, the cursor moves after. Between two
 * cursor writes, each stored event's source id is appended to a journal (`stored.log`, one line,
 * no fsync: a killed process loses nothing the kernel already has); a restart reads it back and
 * acknowledges those events as duplicates without sending them again, however long the bridge was
 * down. The ingress's deduplication of the client message id (2 minutes) covers the last gap, a
 * crash between a send's acknowledgement and its journal line. An id leaves the journal when the
 * cursor moves past its event (per stream: one stream's cursor write keeps the others' ids).
 */
import { appendFile, mkdir, open, readFile, rename, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import * as z from 'zod';

const StateFile = z.object({
  version: z.literal(1),
  cursor: z.string().nullable(),
  rooms: z.record(z.string(), z.string()),
  /** Counts since the state was created: what a resumed bridge adds to. */
  stored: z.int().min(0).default(0),
});
type StateFile = z.infer<typeof StateFile>;

/** A dead-lettered source event. */
export interface DeadLetter {
  sourceId: string;
  type: string;
  reason: string;
  at: string;
}

/** The state of one bridge, in a directory of its own. */
export class BridgeState {
  readonly #file: string;
  readonly #dir: string;
  readonly #journal: string;
  /** Source ids stored since the cursor was last written (from the journal). */
  readonly #recent = new Set<string>();
  #data: StateFile = { version: 1, cursor: null, rooms: {}, stored: 0 };
  #writing: Promise<void> = Promise.resolve();

  private constructor(dir: string) {
    this.#dir = dir;
    this.#file = join(dir, 'state.json');
    this.#journal = join(dir, 'stored.log');
  }

  /** Opens (or creates) the state in `dir`. A corrupt file is an error, never silently reset. */
  static async open(dir: string): Promise<BridgeState> {
    const s = new BridgeState(dir);
    await mkdir(dir, { recursive: true });
    const text = await readFile(s.#file, 'utf8').catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return undefined;
      throw err;
    });
    if (text !== undefined) {
      const parsed = StateFile.safeParse(JSON.parse(text));
      if (!parsed.success) throw new Error(`bridge state ${s.#file} is not valid: ${parsed.error.message}`);
      s.#data = parsed.data;
    }
    const journal = await readFile(s.#journal, 'utf8').catch(() => '');
    // A torn last line (the process died mid-write) is not an id: only complete lines count.
    for (const line of journal.split('\n').slice(0, -1)) if (line) s.#recent.add(line);
    return s;
  }

  /** Whether the event was stored after the cursor was last written. */
  storedSinceCursor(sourceId: string): boolean {
    return this.#recent.has(sourceId);
  }

  /** Journals a stored event (pull sources, between cursor writes). */
  async journal(sourceId: string): Promise<void> {
    this.#recent.add(sourceId);
    await appendFile(this.#journal, `${sourceId.replace(/\n/g, ' ')}\n`);
  }

  /** Where the source should resume (undefined: from the configured start). */
  get cursor(): string | undefined {
    return this.#data.cursor ?? undefined;
  }

  /** Events stored since the state was created. */
  get stored(): number {
    return this.#data.stored;
  }

  /** The room opened for a case key. */
  room(key: string): string | undefined {
    return this.#data.rooms[key];
  }

  /** Remembers a case room (persisted at once: a restart must not open a second one). */
  async setRoom(key: string, room: string): Promise<void> {
    this.#data.rooms[key] = room;
    await this.#persist();
  }

  /**
   * Moves the cursor past events already stored in their rooms, and persists it. `covered`: the
   * source ids the new cursor is past, which leave the journal; the others stay — a source with
   * several streams (Salesforce topics) moves one stream's position while another's stored events
   * still wait for theirs. Without `covered`, the cursor is past everything journaled.
   */
  async advance(cursor: string | undefined, stored: number, covered?: Iterable<string>): Promise<void> {
    if (cursor !== undefined) this.#data.cursor = cursor;
    this.#data.stored += stored;
    await this.#persist();
    if (cursor === undefined || this.#recent.size === 0) return;
    const before = this.#recent.size;
    if (covered) for (const id of covered) this.#recent.delete(id);
    else this.#recent.clear();
    if (this.#recent.size === before) return;
    if (this.#recent.size === 0) {
      await writeFile(this.#journal, '');
      return;
    }
    // What is left, written whole and renamed over the journal: a torn rewrite must not lose it.
    const tmp = `${this.#journal}.tmp`;
    await writeFile(tmp, [...this.#recent].map((id) => `${id}\n`).join(''));
    await rename(tmp, this.#journal);
  }

  /** Appends a poison event to `dead-letters.jsonl` beside the state. */
  async deadLetter(entry: DeadLetter): Promise<void> {
    await appendFile(join(this.#dir, 'dead-letters.jsonl'), `${JSON.stringify(entry)}\n`);
  }

  /** Every dead letter recorded so far. */
  async deadLetters(): Promise<DeadLetter[]> {
    const text = await readFile(join(this.#dir, 'dead-letters.jsonl'), 'utf8').catch(() => '');
    return text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as DeadLetter);
  }

  #persist(): Promise<void> {
    // Writes are chained: two overlapping renames could otherwise land an older snapshot last.
    const snapshot = JSON.stringify(this.#data);
    this.#writing = this.#writing.then(async () => {
      const tmp = `${this.#file}.tmp`;
      await mkdir(dirname(tmp), { recursive: true });
      const fh = await open(tmp, 'w', 0o600);
      try {
        await fh.writeFile(snapshot);
        await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, this.#file);
    });
    return this.#writing;
  }
}
