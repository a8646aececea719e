/**
 * A bridge's durable state: the source cursor (e.g. a Salesforce replay id) and the case rooms it
 * opened, in one JSON file written atomically (temporary file, fsync, rename). The bridge's own
 * state rather than a KV bucket: a bridge runs with participant creds, which may publish only under
 * `parley.in.<id>.>`, and giving bridges write access to a bucket would let one overwrite another's
 * cursor. In Kubernetes the file lives on the bridge's volume (see the Helm values).
 *
 * Order makes it exact: an event is stored in its room first, the cursor moves after; a crash in
 * between replays the event under the same client message id, which the ingress deduplicates.
 */
import { appendFile, mkdir, open, readFile, rename } from 'node:fs/promises';
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
  #data: StateFile = { version: 1, cursor: null, rooms: {}, stored: 0 };
  #writing: Promise<void> = Promise.resolve();

  private constructor(dir: string) {
    this.#dir = dir;
    this.#file = join(dir, 'state.json');
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
    return s;
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

  /** Moves the cursor past events already stored in their rooms, and persists it. */
  async advance(cursor: string | undefined, stored: number): Promise<void> {
    if (cursor !== undefined) this.#data.cursor = cursor;
    this.#data.stored += stored;
    await this.#persist();
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
