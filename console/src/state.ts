/**
 * The console's state, as Preact signals: who is signed in, their rooms with unread counts, the
 * entries loaded per room (history pages and live frames merged by room sequence), the open asks
 * (a question addressed to this person that they have not answered in that room yet), and the
 * agents of theirs that say `needs_input`.
 */
import { computed, signal } from '@preact/signals';
import { type AgentListing, api, type Entry, type Frame, type Me, openStream, type RoomSummary } from './api';

export const me = signal<Me | null | undefined>(undefined);
export const rooms = signal<RoomSummary[]>([]);
export const entries = signal<Record<string, Entry[]>>({});
/** Whether older history exists per room. */
export const more = signal<Record<string, boolean>>({});
export const unread = signal<Record<string, number>>({});
export const streamState = signal<'live' | 'reconnecting' | 'elsewhere' | 'off'>('off');
/** The room on screen (its frames are not unread). */
export const openRoom = signal<string | null>(null);
export const myAgents = signal<AgentListing[]>([]);
/** Messages `seq` of asks answered here (by an answer sent from this console or seen in the room). */
const answered = signal<Set<string>>(new Set());
export const flash = signal<{ kind: 'ok' | 'error'; text: string } | null>(null);

/** An open question to this person. */
export interface Ask {
  room: string;
  entry: Entry;
}

/** The open asks: messages that ask this person (ask_human, or a mention with a question from an agent), unanswered. */
export const asks = computed<Ask[]>(() => {
  const who = me.value?.id;
  if (!who) return [];
  const out: Ask[] = [];
  for (const [room, list] of Object.entries(entries.value)) {
    let lastMine = 0;
    for (const e of list) if (e.message.sender.id === who) lastMine = Math.max(lastMine, e.seq);
    for (const e of list) {
      const m = e.message;
      const isAsk = m.metadata?.['parley.ask'] === 'human' && m.mentions.includes(who);
      if (isAsk && e.seq > lastMine && !answered.value.has(m.id)) out.push({ room, entry: e });
    }
  }
  return out.sort((a, b) => a.entry.message.sentAt.localeCompare(b.entry.message.sentAt));
});

/** Agents of this person waiting for input (presence needs_input). */
export const waitingAgents = computed(() => myAgents.value.filter((a) => a.presence.state === 'needs_input'));

/** What the needs-input badge counts. */
export const needsInputCount = computed(() => asks.value.length + waitingAgents.value.length);

/** Marks an ask answered (its answer was sent). */
export function markAnswered(messageId: string): void {
  answered.value = new Set([...answered.value, messageId]);
}

/** Shows a short notice. */
export function notify(kind: 'ok' | 'error', text: string): void {
  flash.value = { kind, text };
}

function merge(room: string, add: Entry[]): void {
  const byseq = new Map((entries.value[room] ?? []).map((e) => [e.seq, e]));
  for (const e of add) byseq.set(e.seq, e);
  entries.value = { ...entries.value, [room]: [...byseq.values()].sort((a, b) => a.seq - b.seq) };
}

/** Loads the newest page of a room (or the page before the oldest loaded, with `older`). */
export async function loadHistory(room: string, older = false): Promise<void> {
  const have = entries.value[room] ?? [];
  const before = older && have[0] ? `&before=${have[0].seq}` : '';
  const page = await api<{ entries: Entry[]; more: boolean }>(
    `/v1/rooms/${room}/messages?order=newest&limit=50${before}`,
  );
  merge(room, page.entries);
  more.value = { ...more.value, [room]: page.more };
}

/** Reads what came after the newest loaded entry (e.g. one's own send, which the stream does not echo). */
export async function catchUp(room: string): Promise<void> {
  const have = entries.value[room] ?? [];
  const last = have[have.length - 1]?.seq;
  if (last === undefined) return loadHistory(room);
  const page = await api<{ entries: Entry[] }>(
    `/v1/rooms/${room}/messages?order=oldest&after=${last}&limit=100`,
  );
  merge(room, page.entries);
}

export async function loadRooms(): Promise<void> {
  const page = await api<{ rooms: RoomSummary[] }>('/v1/rooms?limit=100');
  rooms.value = page.rooms;
  // Questions may be waiting in any room: read the newest page of each not loaded yet.
  await Promise.all(page.rooms.filter((r) => !entries.value[r.id]).map((r) => loadHistory(r.id)));
}

export async function loadAgents(): Promise<void> {
  const who = me.value;
  if (who?.kind !== 'human') return;
  const page = await api<{ agents: AgentListing[] }>(`/v1/inventory?owner=${who.id}&limit=100`);
  myAgents.value = page.agents;
}

function onFrame(f: Frame): void {
  if (f.event !== 'message') {
    void loadRooms();
    return;
  }
  const wasAsk = asks.value.length;
  merge(f.room, [{ seq: f.roomSeq, message: f.message }]);
  if (!rooms.value.some((r) => r.id === f.room)) void loadRooms();
  if (openRoom.value !== f.room || document.hidden) {
    unread.value = { ...unread.value, [f.room]: (unread.value[f.room] ?? 0) + 1 };
  }
  if (asks.value.length > wasAsk || document.hidden) backgroundNotice(f);
}

/** The browser's Notification API, when the tab is in the background and the person allowed it. */
function backgroundNotice(f: Frame): void {
  if (!document.hidden || typeof Notification === 'undefined' || Notification.permission !== 'granted')
    return;
  const text = f.message.parts.find((p) => p.type === 'text');
  const n = new Notification(`${f.message.sender.name ?? f.message.sender.id}`, {
    body: text && 'text' in text ? text.text.slice(0, 200) : 'new message',
    tag: f.message.id,
  });
  n.onclick = () => {
    window.focus();
    location.hash = `#/rooms/${f.room}`;
  };
}

let stop: (() => void) | undefined;
let poll: ReturnType<typeof setInterval> | undefined;

/** Signs in (whoever the cookie or token is) and starts the live parts; null when nobody. */
export async function start(): Promise<void> {
  try {
    me.value = await api<Me>('/v1/me');
  } catch {
    me.value = null;
    return;
  }
  stop?.();
  stop = openStream(onFrame, (s) => {
    streamState.value = s;
  });
  await Promise.all([loadRooms(), loadAgents()]).catch((err: Error) => notify('error', err.message));
  clearInterval(poll);
  // Presence (needs_input of one's agents) is not on the inbox stream: read it every few seconds.
  poll = setInterval(() => void loadAgents().catch(() => undefined), 3000);
}

/** Opens a room: its newest page, and its unread count cleared. */
export async function enterRoom(room: string): Promise<void> {
  openRoom.value = room;
  unread.value = { ...unread.value, [room]: 0 };
  if (!entries.value[room]) await loadHistory(room);
}

/** What the gateway says about itself for the page (the Jaeger UI, when configured). */
export const siteConfig = signal<{ jaegerUrl?: string }>({});
void fetch('/console/config.json')
  .then((r) => (r.ok ? r.json() : {}))
  .then((c: { jaegerUrl?: string }) => {
    siteConfig.value = c;
  })
  .catch(() => undefined);

/** Display names of participants seen (agents from their cards; oneself from /v1/me). */
export const names = signal<Record<string, string>>({});
const asked = new Set<string>();

/** A participant's display name, fetched once for agents; the id until it is known. */
export function nameOf(id: string): string {
  if (id === me.value?.id) return me.value.name ? `${me.value.name} (you)` : 'you';
  const known = names.value[id] ?? myAgents.value.find((a) => a.agent.id === id)?.agent.card.name;
  if (known) return known;
  if (id.startsWith('agt_') && !asked.has(id)) {
    asked.add(id);
    void api<AgentListing>(`/v1/agents/${id}`)
      .then((a) => {
        names.value = { ...names.value, [id]: a.agent.card.name };
      })
      .catch(() => undefined);
  }
  return id;
}
