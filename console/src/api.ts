/**
 * The console's only way to Parley: the gateway's public API (`/v1` over fetch, the live stream
 * over a WebSocket or SSE). Whatever the console does, a script with the same credentials can do.
 *
 * Signed in either by the session cookie of the one-time login link (the browser sends it; the
 * WebSocket carries it too) or by an OIDC bearer token pasted at sign-in (kept in sessionStorage
 * for this tab only; the stream then goes over SSE with fetch, since a browser WebSocket cannot
 * send an Authorization header).
 */

/** A problem+json answer of the gateway, with the Parley code. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

const TOKEN_KEY = 'parley.token';

/** The bearer token of this tab, if signed in with one. */
export const bearer = (): string | null => sessionStorage.getItem(TOKEN_KEY);
/** Keeps (or forgets, with null) the bearer token of this tab. */
export function setBearer(token: string | null): void {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** Calls `/v1…`; throws {@link ApiError} with the gateway's code on anything but 2xx. */
export async function api<T>(path: string, o: { method?: string; body?: unknown } = {}): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' };
  const token = bearer();
  if (token) headers.authorization = `Bearer ${token}`;
  if (o.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, {
    method: o.method ?? (o.body === undefined ? 'GET' : 'POST'),
    headers,
    credentials: 'same-origin',
    ...(o.body !== undefined ? { body: JSON.stringify(o.body) } : {}),
  });
  const text = await res.text();
  const json = text ? (JSON.parse(text) as Record<string, unknown>) : {};
  if (!res.ok) {
    throw new ApiError(
      res.status,
      String(json.code ?? res.status),
      String(json.detail ?? json.title ?? res.statusText),
    );
  }
  return json as T;
}

// ---- Wire shapes (as the contracts define them; only the fields the console reads) ----

export interface Me {
  id: string;
  kind: 'human' | 'agent' | 'service';
  name?: string;
  org?: string;
  owner?: string;
  role?: string;
  superadmin?: boolean;
}
export interface RoomSummary {
  id: string;
  title: string;
  owner: string;
  role: string;
  direct: boolean;
  closed: boolean;
  memberCount: number;
  createdAt: string;
}
export interface RoomMember {
  id: string;
  kind?: string;
  role: string;
  name?: string;
}
export interface Room {
  id: string;
  title: string;
  owner: string;
  paused: boolean;
  closed: boolean;
  members: RoomMember[];
}
export type Part =
  | { type: 'text'; text: string }
  | { type: 'data'; data: unknown; mediaType?: string }
  | { type: 'file'; name: string; mediaType?: string; url?: string; artifact?: string };
export interface Message {
  id: string;
  room: string;
  sender: { id: string; kind: string; name?: string };
  kind: string;
  parts: Part[];
  mentions: string[];
  replyTo?: string;
  provenance?: { trust: 'internal' | 'external'; source: string; note?: string };
  metadata?: Record<string, string>;
  trace?: { traceparent: string };
  sentAt: string;
}
export interface Entry {
  seq: number;
  message: Message;
}
export interface Handoff {
  goal: string;
  done: string[];
  triedAndRuledOut: string[];
  openQuestions: string[];
  artifacts: string[];
}
export interface ContactRequest {
  id: string;
  from: string;
  to: string;
  reason: string;
  state: string;
  createdAt: string;
  expiresAt: string;
}
export interface AgentListing {
  agent: {
    id: string;
    owner: string;
    org: string;
    status: string;
    card: {
      name: string;
      description: string;
      runtime: string;
      skills: { id: string; name: string; tags?: string[] }[];
      tools: string[];
      scopes: string[];
    };
  };
  presence: { state: string; activity?: string; lastSeen?: string };
}
export interface UsageRow {
  key: string;
  inputTokens: number;
  outputTokens: number;
  costUsd: number;
  reports: number;
}
export interface AuditHop {
  kind: string;
  id: string;
  actor: string;
  onBehalfOf: string[];
  decision?: string;
  room?: string;
  tool?: string;
  status?: string;
  at?: string;
}

/** The media type of a handoff's data part. */
export const HANDOFF_MEDIA_TYPE = 'application/vnd.parley.handoff+json';

/** A frame of the live stream. */
export interface Frame {
  type: 'message';
  event: string;
  room: string;
  roomSeq: number;
  cursor: string;
  message: Message;
}

/**
 * Keeps the caller's live stream open: a WebSocket with the session cookie, or SSE over fetch with
 * the bearer token. After a drop it reconnects with the cursor of the last frame handled, so
 * nothing is lost and nothing comes twice. Returns a function that stops it. The gateway keeps one
 * stream per principal: when another tab takes it over, this one stops and says `elsewhere`.
 */
export function openStream(
  onFrame: (f: Frame) => void,
  onState: (s: 'live' | 'reconnecting' | 'elsewhere') => void,
) {
  let cursor: string | undefined;
  let stopped = false;
  let ws: WebSocket | undefined;
  let abort: AbortController | undefined;
  let delay = 250;
  const handle = (f: Frame) => {
    cursor = f.cursor;
    onFrame(f);
  };
  const retry = () => {
    if (stopped) return;
    onState('reconnecting');
    setTimeout(connect, delay);
    delay = Math.min(delay * 2, 10_000);
  };
  function connect() {
    if (stopped) return;
    const q = cursor ? `?cursor=${encodeURIComponent(cursor)}` : '';
    const token = bearer();
    if (!token) {
      ws = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/stream${q}`);
      ws.onopen = () => {
        delay = 250;
        onState('live');
      };
      ws.onmessage = (e) => handle(JSON.parse(String(e.data)) as Frame);
      ws.onclose = (e) => {
        // 4000: the gateway keeps one stream per person, and another tab (or client) took it over.
        // Reconnecting would take it back and start a tug of war: say so and wait to be asked.
        if (e.code === 4000) onState('elsewhere');
        else retry();
      };
      return;
    }
    abort = new AbortController();
    void (async () => {
      const res = await fetch(`/v1/stream/sse${q}`, {
        headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' },
        signal: abort.signal,
      });
      if (!res.ok || !res.body) throw new Error(`stream: HTTP ${res.status}`);
      delay = 250;
      onState('live');
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
          const event = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data = event
            .split('\n')
            .filter((l) => l.startsWith('data: '))
            .map((l) => l.slice(6))
            .join('\n');
          if (data) handle(JSON.parse(data) as Frame);
        }
      }
    })()
      .catch(() => undefined)
      .finally(retry);
  }
  connect();
  return () => {
    stopped = true;
    ws?.close();
    abort?.abort();
  };
}
