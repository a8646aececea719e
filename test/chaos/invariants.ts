/**
 * The invariants the chaos test checks while faults run, as small state machines fed with what the
 * test observes; each returns a sentence when the invariant breaks (see chaos.ts).
 */

/**
 * The fan-out lease never has two holders: a key changes holder only after the previous holder's
 * last write expired (the bucket's TTL after it; expiry runs on the server's timer, never early) or
 * was released (deleted).
 *
 * One exception is told apart: a write that JetStream stored although the revision it was
 * conditional on (`Nats-Expected-Last-Subject-Sequence`) was no longer the key's last — nats-server
 * checks that condition before the raft proposal, not at apply, so two writes in flight at once can
 * both pass (nats-server issue #4320, seen on 2.9.15–2.9.20 and older). The holder whose write was
 * superseded that way learns it at its next renewal (refused); it is two holders only if that holder
 * writes the key again, and is counted in {@link superseded} otherwise.
 */
export class LeaseHolders {
  readonly #holders = new Map<string, { holder: string; at: number; revision: number } | undefined>();
  /** Per key, the revision of the last entry read (a write or a release), when it was told. */
  readonly #revisions = new Map<string, number>();
  /** Holders known before the last gap in what the watcher read (see {@link gap}). */
  readonly #beforeGap = new Map<string, string>();
  /** Per key, the holder whose write a stale conditional write superseded, and by whom. */
  readonly #superseded = new Map<string, { holder: string; by: string; at: number }>();
  /** Holder changes seen. */
  handovers = 0;
  /** Gaps in what the watcher read while it knew holders. */
  gaps = 0;
  /** Holder changes across a gap: not checked (the release may be in what was missed). */
  unchecked = 0;
  /** Writes of another holder stored on a stale condition (see the class comment). */
  superseded: string[] = [];
  /** Entries the watch missed and had read back (see {@link recover}). */
  recovered = 0;
  constructor(private readonly ttlMs: number) {}
  /**
   * `holder` wrote `key` at `at` (server time, ms), stored at `revision`; `expected`: the revision
   * the write was conditional on, when it was.
   */
  write(key: string, holder: string, at: number, revision = 0, expected?: number): string | undefined {
    if (this.#stale(key, revision)) return undefined;
    const prev = this.#holders.get(key);
    this.#holders.set(key, { holder, at, revision });
    if (revision > 0) this.#revisions.set(key, revision);
    const before = this.#beforeGap.get(key);
    this.#beforeGap.delete(key);
    const gone = this.#superseded.get(key);
    if (gone?.holder === holder) {
      this.#superseded.delete(key);
      // While the write that superseded it is live: renewed as if it still held the lease.
      if (prev?.holder === gone.by && at - prev.at < this.ttlMs)
        return `lease ${key} written again by ${holder} after ${gone.by} took it ${Math.round(at - gone.at)} ms before on a stale condition: two holders`;
    }
    if (!prev) {
      if (before !== undefined && before !== holder) this.unchecked++;
      return undefined;
    }
    if (prev.holder === holder) return undefined;
    this.handovers++;
    if (at - prev.at >= this.ttlMs) return undefined;
    if (expected !== undefined && revision > 0 && expected < prev.revision) {
      this.#superseded.set(key, { holder: prev.holder, by: holder, at });
      this.superseded.push(
        `${key}: ${holder}'s write at revision ${revision} was conditional on ${expected}, ${prev.holder}'s at ${prev.revision} was last`,
      );
      return undefined;
    }
    // The revisions tell the next reader whether the watch saw every write of the key in between.
    const stored =
      revision > 0
        ? ` (revision ${revision}${expected !== undefined ? `, conditional on ${expected}` : ''})`
        : '';
    const theirs = prev.revision > 0 ? ` (revision ${prev.revision})` : '';
    return `lease ${key} taken by ${holder}${stored} ${Math.round(at - prev.at)} ms after ${prev.holder} wrote it${theirs}, with no release (TTL ${this.ttlMs} ms): two holders`;
  }
  /** `key` was deleted or purged (handed over), at `revision` when told. */
  release(key: string, revision = 0): void {
    if (this.#stale(key, revision)) return;
    this.#holders.set(key, undefined);
    if (revision > 0) this.#revisions.set(key, revision);
    this.#superseded.delete(key);
    this.#beforeGap.delete(key);
  }
  /** An entry at or before one of its key already applied (one read back, see {@link recover}). */
  #stale(key: string, revision: number): boolean {
    return revision > 0 && revision <= (this.#revisions.get(key) ?? 0);
  }
  /**
   * Whether a write of `key` conditional on revision `expected` proves the watch missed entries of
   * that key: the key's last entry when the write was stored came after the last one read. A watch
   * reading through a node kill did (chaos short form: 7 takeovers conditional on releases at
   * revisions 51–60 it never read, the stream's first sequence still below them).
   */
  missed(key: string, expected: number): boolean {
    const last = this.#revisions.get(key);
    return last !== undefined && expected > last;
  }
  /**
   * The entry of `key` a write was conditional on, read back from the stream after {@link missed}:
   * `holder` for a write, none for a release; `entry` undefined when it could not be read (expired,
   * or the stream did not answer), which is a gap for this key (see {@link gap}). It becomes what is
   * known of the key without being judged itself: the writes before it were missed too.
   */
  recover(key: string, entry?: { revision: number; holder?: string; at: number }): void {
    if (!entry) {
      this.#forget(key);
      this.gaps++;
      return;
    }
    this.recovered++;
    const { revision, holder, at } = entry;
    if (holder === undefined) {
      this.release(key, revision);
      return;
    }
    const prev = this.#holders.get(key);
    if (prev && prev.holder !== holder) this.unchecked++;
    this.#holders.set(key, { holder, at, revision });
    this.#revisions.set(key, revision);
  }
  /**
   * The watcher may have missed entries (they expired before it read them: the bucket's TTL is its
   * stream's max age). A release among them would make the next holder look like a second one, so
   * what was known is dropped: the next write of each key is a fresh start, counted in
   * {@link unchecked} when it names another holder.
   */
  gap(): void {
    const known = [...this.#holders.values()].some((h) => h !== undefined);
    for (const key of [...this.#holders.keys()]) this.#forget(key);
    this.#revisions.clear();
    if (known) this.gaps++;
  }
  /** Drops what is known of `key`, keeping its holder for the next write to compare with. */
  #forget(key: string): void {
    const h = this.#holders.get(key);
    if (h) this.#beforeGap.set(key, h.holder);
    this.#holders.delete(key);
    this.#revisions.delete(key);
  }
}

/**
 * No inbox subject is written out of order or by two writers: room positions grow, and each entry
 * names the one before it (`Parley-Prev-Seq`) — or a later one, a hole: writes of the fan-out that
 * JetStream refused while a later one of the same run was stored (a stream leader change in the
 * middle of a pipelined run). A hole is counted, not a violation: the recipient backfills it from
 * the room's history (and the member checks still require every message, once, in order). An entry
 * naming an earlier position than the last written is a second writer's, and is one — unless it says
 * (`Parley-Rewound`) that the room log lost the last written position and went on from an earlier one:
 * the subject's positions go back to it (counted; what JetStream lost is reported by the caller).
 */
export class InboxChains {
  readonly #last = new Map<string, number>();
  /** Entries seen. */
  entries = 0;
  /** Entries written after a hole (see the class comment). */
  holes = 0;
  /** Entries that went back below a position the room log lost (see the class comment). */
  rewinds = 0;
  /**
   * An entry of `subject` at room position `seq`, naming `prev` (0 when absent) and, after a lost
   * position, `rewound`.
   */
  entry(subject: string, seq: number, prev: number, rewound = 0): string | undefined {
    this.entries++;
    const last = this.#last.get(subject) ?? 0;
    if (rewound > 0 && rewound === last && prev < seq) {
      this.#last.set(subject, seq);
      this.rewinds++;
      return undefined;
    }
    this.#last.set(subject, Math.max(seq, last));
    if (!(seq > last)) return `inbox ${subject}: position ${seq} written after ${last}`;
    if (last > 0 && prev > last && prev < seq) {
      this.holes++;
      return undefined;
    }
    if (last > 0 && prev !== last)
      return `inbox ${subject}: position ${seq} names ${prev} before it, the last written was ${last}`;
    return undefined;
  }
  /** The highest position read on `subject`. */
  last(subject: string): number {
    return this.#last.get(subject) ?? 0;
  }
}

/**
 * A member handles each message of a room once, in room order; after a delivery saying the room log
 * lost the member's last position (`rewound`), the room goes on from that delivery's position.
 */
export class RoomOrder {
  readonly #last = new Map<string, number>();
  /** `member` handled message `id` at position `seq` of `room` (`rewound`: see the class comment). */
  handled(member: string, room: string, seq: number, id: string, rewound?: number): string | undefined {
    const key = `${member}/${room}`;
    const last = this.#last.get(key) ?? 0;
    if (rewound !== undefined && rewound >= last) {
      this.#last.set(key, seq);
      return undefined;
    }
    this.#last.set(key, Math.max(seq, last));
    if (seq > last) return undefined;
    return `${member} handled ${room} position ${seq} after ${last} (${seq === last ? 'twice' : 'out of order'}, message ${id})`;
  }
}
