/**
 * The runaway detector: when agents in a room exchange more than N messages within T with no human
 * message in between, the room is paused for agents (and its owner and human members are told).
 *
 * It counts in the fan-out, not in the ingress. The partition's lease holder reads every entry of
 * the room's log exactly in log order, whichever ingress replica accepted it, so one counter sees
 * the whole conversation; an ingress replica sees only the share of sends NATS happened to route to
 * it, and would need a shared counter (a round trip per send) to see more. Times are the log's own
 * timestamps, so a re-run after a crash counts the same entries the same way. When the partition
 * moves to another replica the count starts again there (a runaway is caught a window later at
 * worst); a human message, a pause and a resume reset it.
 */
import { participantKind } from '@parley/contracts';

/** One log entry, as the fan-out sees it. */
export interface ObservedEntry {
  room: string;
  seq: number;
  kind: string;
  sender: string;
  /** When the log stored it (ms since epoch). */
  at: number;
  /** The data part of a `room` entry (its change). */
  change?: string | undefined;
}

/** Settings of the detector. */
export interface RunawayOptions {
  /** More than this many agent messages … */
  messages: number;
  /** … within this many milliseconds, with no human message, trips it. */
  windowMs: number;
  /** Called once per trip (the detector stays tripped until a reset). */
  onTrip(room: string, info: { messages: number; windowMs: number; seq: number; agents: string[] }): void;
  /** Rooms tracked at most (least recently active are forgotten). @default 20000 */
  maxRooms?: number;
}

const CONVERSATION = new Set(['message', 'handoff', 'status', 'task.assigned', 'task.update']);

/** Builds the detector; feed it every log entry with {@link observe}. */
export function createRunawayDetector(o: RunawayOptions) {
  const rooms = new Map<string, { times: number[]; agents: Set<string>; tripped: boolean }>();
  const maxRooms = o.maxRooms ?? 20_000;

  return {
    observe(e: ObservedEntry): void {
      if (e.kind === 'room') {
        if (e.change === 'paused' || e.change === 'resumed') rooms.delete(e.room);
        return;
      }
      if (!CONVERSATION.has(e.kind)) return;
      const who = participantKind(e.sender);
      if (who === 'human') {
        rooms.delete(e.room);
        return;
      }
      if (who !== 'agent') return;
      let s = rooms.get(e.room);
      if (s) {
        // Most recently active last, so the first key is the one to forget.
        rooms.delete(e.room);
      } else {
        s = { times: [], agents: new Set(), tripped: false };
        if (rooms.size >= maxRooms) rooms.delete(rooms.keys().next().value as string);
      }
      rooms.set(e.room, s);
      if (s.tripped) return;
      s.times.push(e.at);
      s.agents.add(e.sender);
      let drop = 0;
      while (drop < s.times.length && e.at - (s.times[drop] as number) > o.windowMs) drop++;
      if (drop) s.times.splice(0, drop);
      if (s.times.length > o.messages) {
        s.tripped = true;
        o.onTrip(e.room, {
          messages: s.times.length,
          windowMs: o.windowMs,
          seq: e.seq,
          agents: [...s.agents],
        });
      }
    },
    /** Rooms being counted. */
    size: () => rooms.size,
  };
}

/** The detector of {@link createRunawayDetector}. */
export type RunawayDetector = ReturnType<typeof createRunawayDetector>;
