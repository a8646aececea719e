/**
 * Live delivery over a real WebSocket client (`ws`) and over SSE (fetch): in order, acknowledged
 * only after written, and across a reconnect nothing lost and nothing twice — also when frames
 * were written to a connection the client never read.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { gatewayApi, inboxStream } from '@parley/contracts';
import type { Agent } from '@parley/sdk';
import {
  connectAdmin,
  connectTo,
  createAgent,
  startParley,
  type TestParley,
  waitFor,
} from '@parley/test/harness';
import WebSocket from 'ws';

interface Frame {
  type: string;
  id: string;
  cursor: string;
  room: string;
  roomSeq: number;
  event: string;
  message: { parts: { type: string; text?: string }[]; sender: { id: string } };
  gap?: { after: number; retainedFrom: number };
}

/** A WebSocket client that collects frames. */
function openStream(url: string, token?: string) {
  const frames: Frame[] = [];
  const ws = new WebSocket(url, token ? { headers: { authorization: `Bearer ${token}` } } : {});
  const opened = new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('unexpected-response', (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    ws.once('error', reject);
  });
  ws.on('message', (data) => frames.push(JSON.parse(String(data)) as Frame));
  const closed = new Promise<{ code: number }>((resolve) => ws.once('close', (code) => resolve({ code })));
  return { ws, frames, opened, closed };
}

const textOf = (f: Frame) => f.message.parts[0]?.text;

describe('gateway live stream', () => {
  let parley: TestParley;
  let admin: Agent;
  let wsBase: string;

  before(async () => {
    parley = await startParley();
    admin = await connectAdmin(parley);
    wsBase = parley.httpUrl.replace(/^http/, 'ws');
  });
  after(async () => {
    await admin?.close();
    await parley?.destroy();
  });

  async function pair(name: string) {
    const { agent: sender, creds } = await createAgent(admin, { name: `${name}-sender` });
    const { agent: reader } = await createAgent(admin, { name: `${name}-reader` });
    const a = await connectTo(parley, creds);
    const room = await a.rooms.create(name, { members: [reader.id] });
    const { key } = await admin.call(gatewayApi.createKey, { agent: reader.id, scopes: ['read'] });
    return { a, room, reader: reader.id, key, sender: sender.id };
  }

  it('streams the inbox in order and acknowledges what it wrote', async () => {
    const { a, room, reader, key } = await pair('ordered');
    const s = openStream(`${wsBase}/v1/stream`, key);
    await s.opened;
    for (let i = 0; i < 20; i++) await room.send(`m${i}`);
    await waitFor(() => s.frames.filter((f) => f.event === 'message').length >= 20, 'twenty frames');
    const texts = s.frames.filter((f) => f.event === 'message').map(textOf);
    assert.deepEqual(
      texts,
      Array.from({ length: 20 }, (_, i) => `m${i}`),
    );
    await waitFor(async () => {
      const info = await parley.jsm.consumers.info(inboxStream(reader), reader);
      return info.num_ack_pending === 0 && info.num_pending === 0;
    }, 'every delivery acknowledged');
    s.ws.close();
    await s.closed;
    await a.close();
  });

  it('refuses a stream without credentials before the upgrade', async () => {
    const s = openStream(`${wsBase}/v1/stream`);
    await assert.rejects(s.opened, /HTTP 401/);
  });

  it('resumes after a reconnect: nothing lost, nothing twice, even frames written but never read', async () => {
    const { a, room, key } = await pair('resume');
    const first = openStream(`${wsBase}/v1/stream`, key);
    await first.opened;
    for (let i = 0; i < 15; i++) await room.send(`r${i}`);
    await waitFor(() => first.frames.filter((f) => f.event === 'message').length >= 5, 'five frames');
    // The client handled five and then died: frames after them may have been written (and
    // acknowledged by the gateway) but were never handled.
    const handled = first.frames.filter((f) => f.event === 'message').slice(0, 5);
    const cursor = handled[4]?.cursor as string;
    first.ws.terminate();
    await first.closed;
    for (let i = 15; i < 30; i++) await room.send(`r${i}`);

    const second = openStream(`${wsBase}/v1/stream?cursor=${cursor}`, key);
    await second.opened;
    await waitFor(
      () => second.frames.filter((f) => f.event === 'message').length >= 25,
      () => `25 more frames (got ${second.frames.filter((f) => f.event === 'message').length})`,
    );
    const all = [...handled, ...second.frames.filter((f) => f.event === 'message')].map(textOf);
    assert.deepEqual(
      all,
      Array.from({ length: 30 }, (_, i) => `r${i}`),
      'every message once, in order',
    );
    // Nothing more arrives after the last one (no duplicates trailing in).
    await room.send('marker');
    await waitFor(() => second.frames.some((f) => textOf(f) === 'marker'), 'the marker');
    assert.equal(second.frames.filter((f) => f.event === 'message').length, 26);
    second.ws.close();
    await second.closed;
    await a.close();
  });

  it('a browser session streams from its own origin only (no cross-site WebSocket hijacking)', async () => {
    const code = await parley.gateway.createLoginCode(parley.home.state.admin.id);
    const login = (await (await fetch(`${parley.httpUrl}/v1/login?code=${code}`)).json()) as {
      token: string;
    };
    const cookie = `parley_session=${encodeURIComponent(login.token)}`;
    const host = new URL(parley.httpUrl).host;
    const evil = new WebSocket(`${wsBase}/v1/stream`, {
      headers: { cookie, origin: 'https://evil.example' },
    });
    const refused = await new Promise<number>((resolve) => {
      evil.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
      evil.once('open', () => resolve(101));
    });
    assert.equal(refused, 403);
    const own = new WebSocket(`${wsBase}/v1/stream`, { headers: { cookie, origin: `http://${host}` } });
    await new Promise<void>((resolve, reject) => {
      own.once('open', () => resolve());
      own.once('unexpected-response', (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    });
    own.close();
  });

  it('a newer stream of the same principal replaces the older one', async () => {
    const { a, key } = await pair('replace');
    const one = openStream(`${wsBase}/v1/stream`, key);
    await one.opened;
    const two = openStream(`${wsBase}/v1/stream`, key);
    await two.opened;
    assert.equal((await one.closed).code, 4000);
    two.ws.close();
    await two.closed;
    await a.close();
  });

  it('SSE delivers the same frames and resumes from Last-Event-ID', async () => {
    const { a, room, key } = await pair('sse');
    const read = async (headers: Record<string, string>, count: number) => {
      const ctl = new AbortController();
      const res = await fetch(`${parley.httpUrl}/v1/stream/sse`, {
        headers: { authorization: `Bearer ${key}`, ...headers },
        signal: ctl.signal,
      });
      assert.equal(res.status, 200);
      assert.match(String(res.headers.get('content-type')), /^text\/event-stream/);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const events: { id: string; frame: Frame }[] = [];
      let buffer = '';
      while (events.filter((e) => e.frame.event === 'message').length < count) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += new TextDecoder().decode(value);
        let end = buffer.indexOf('\n\n');
        while (end >= 0) {
          const chunk = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const id = /^id: (.*)$/m.exec(chunk)?.[1];
          const data = /^data: (.*)$/m.exec(chunk)?.[1];
          if (id && data) events.push({ id, frame: JSON.parse(data) as Frame });
          end = buffer.indexOf('\n\n');
        }
      }
      ctl.abort();
      return events.filter((e) => e.frame.event === 'message');
    };
    for (let i = 0; i < 4; i++) await room.send(`s${i}`);
    const firstEvents = await read({}, 2);
    const lastId = firstEvents[1]?.id as string;
    for (let i = 4; i < 6; i++) await room.send(`s${i}`);
    const rest = await read({ 'last-event-id': lastId }, 4);
    assert.deepEqual(
      [...firstEvents.slice(0, 2), ...rest].map((e) => textOf(e.frame)),
      ['s0', 's1', 's2', 's3', 's4', 's5'],
    );
    await a.close();
  });
});

describe('gateway live stream past the room log’s retention (10 entries per room)', () => {
  let parley: TestParley;
  let admin: Agent;
  before(async () => {
    parley = await startParley({ backbone: { roomsMaxMsgsPerRoom: 10 } });
    admin = await connectAdmin(parley);
  });
  after(async () => {
    await admin?.close();
    await parley?.destroy();
  });

  it('a resume from a position the room log no longer holds goes on from where it starts, with the gap', async () => {
    const wsBase = parley.httpUrl.replace(/^http/, 'ws');
    const { creds } = await createAgent(admin, { name: 'capped-sender' });
    const { agent: reader } = await createAgent(admin, { name: 'capped-reader' });
    const a = await connectTo(parley, creds);
    const room = await a.rooms.create('capped', { members: [reader.id] });
    const { key } = await admin.call(gatewayApi.createKey, { agent: reader.id, scopes: ['read'] });
    const first = openStream(`${wsBase}/v1/stream`, key);
    await first.opened;
    const sent: number[] = [];
    for (let i = 0; i < 15; i++) sent.push((await room.send(`c${i}`)).roomSeq);
    await waitFor(() => first.frames.filter((f) => f.event === 'message').length >= 15, 'fifteen frames');
    // The client handled two and died; the room then kept only its newest 10 entries (c5..c14).
    const cursor = first.frames.filter((f) => f.event === 'message')[1]?.cursor as string;
    first.ws.terminate();
    await first.closed;

    const second = openStream(`${wsBase}/v1/stream?cursor=${cursor}`, key);
    try {
      await second.opened;
      // The marker only once the resume read is done: a new entry would push another old one out.
      await waitFor(() => second.frames.some((f) => textOf(f) === 'c14'), 'the resumed frames');
      await room.send('marker');
      await waitFor(() => second.frames.some((f) => textOf(f) === 'marker'), 'the marker');
      const frames = second.frames.filter((f) => f.event === 'message');
      assert.deepEqual(frames.map(textOf), [...Array.from({ length: 10 }, (_, i) => `c${i + 5}`), 'marker']);
      assert.deepEqual(frames[0]?.gap, { after: sent[1], retainedFrom: sent[5] });
      assert.ok(frames.slice(1).every((f) => f.gap === undefined));
    } finally {
      second.ws.close();
      await second.closed;
      await a.close();
    }
  });
});
