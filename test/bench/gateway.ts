/**
 * `pnpm --filter @parley/test bench:gateway`: the HTTP edge against the NATS path it wraps, in one
 * process on one Parley (services in this process, nats-server a child):
 *
 * - send latency: `POST /v1/rooms/<id>/messages` (fetch, keep-alive) vs `room.send()` over NATS
 *   (the SDK), sequential, the same room and payload;
 * - delivery latency: send → frame on `/v1/stream` (a `ws` client) vs send → SDK handler;
 * - webhook in → delivered to a member (Standard Webhooks POST → the member's SDK handler).
 *
 * Flags: --n <count> per measurement (default 500), --json.
 */
import { parseArgs } from 'node:util';
import { gatewayApi } from '@parley/contracts';
import { Webhook } from 'standardwebhooks';
import WebSocket from 'ws';
import { connectAdmin, connectTo, createAgent, startParley } from '../harness/index.js';

const { values: args } = parseArgs({
  options: { n: { type: 'string' }, json: { type: 'boolean', default: false } },
});
const N = Number(args.n ?? 500);

function pct(samples: number[], p: number): number {
  const s = [...samples].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] as number;
}
const stats = (xs: number[]) => ({ p50: pct(xs, 50), p99: pct(xs, 99), n: xs.length });

const parley = await startParley();
try {
  const admin = await connectAdmin(parley);
  const { agent: a, creds: aCreds } = await createAgent(admin, { name: 'bench-sender' });
  const { agent: b, creds: bCreds } = await createAgent(admin, { name: 'bench-reader' });
  const { agent: c } = await createAgent(admin, { name: 'bench-stream' });
  const sender = await connectTo(parley, aCreds);
  const room = await sender.rooms.create('bench', { members: [b.id, c.id] });
  const { key } = await admin.call(gatewayApi.createKey, { agent: a.id });
  const { key: cKey } = await admin.call(gatewayApi.createKey, { agent: c.id, scopes: ['read'] });
  const payload = 'x'.repeat(512);
  const url = `${parley.httpUrl}/v1/rooms/${room.id}/messages`;
  const body = JSON.stringify({ text: payload });
  const post = () =>
    fetch(url, {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    });

  // Warm both paths (connections, JIT, the gateway's pooled connection for the sender).
  for (let i = 0; i < 50; i++) {
    await room.send(payload);
    await (await post()).arrayBuffer();
  }

  // 1. Send latency, interleaved in blocks so drift on a shared machine hits both alike.
  const natsSend: number[] = [];
  const httpSend: number[] = [];
  for (let i = 0; i < N; i++) {
    let t = performance.now();
    await room.send(payload);
    natsSend.push(performance.now() - t);
    t = performance.now();
    const res = await post();
    await res.arrayBuffer();
    if (res.status !== 201) throw new Error(`HTTP ${res.status}`);
    httpSend.push(performance.now() - t);
  }
  process.stderr.write('send latency measured\n');

  // 2. Delivery latency: SDK handler (b) vs WebSocket frames (c), for the same messages.
  const reader = await connectTo(parley, bCreds);
  const sdkSeen = new Map<string, number>();
  reader.on('message', (d) => {
    const text = (d.message.parts[0] as { text: string }).text;
    if (text.startsWith('lat:')) sdkSeen.set(text, performance.now());
  });
  await reader.listening;
  const wsSeen = new Map<string, number>();
  const ws = new WebSocket(`${parley.httpUrl.replace(/^http/, 'ws')}/v1/stream`, {
    headers: { authorization: `Bearer ${cKey}` },
  });
  await new Promise<void>((r, j) => {
    ws.once('open', () => r());
    ws.once('error', j);
  });
  ws.on('message', (data) => {
    const f = JSON.parse(String(data)) as { event: string; message: { parts: { text?: string }[] } };
    const text = f.message.parts[0]?.text ?? '';
    if (text.startsWith('lat:')) wsSeen.set(text, performance.now());
  });
  const sdkDelivery: number[] = [];
  const wsDelivery: number[] = [];
  const waitUntil = async (fn: () => boolean) => {
    const deadline = Date.now() + 20_000;
    while (!fn()) {
      if (Date.now() > deadline) throw new Error('delivery timed out');
      await new Promise((r) => setImmediate(r));
    }
  };
  for (let i = 0; i < N; i++) {
    const text = `lat:${i}`;
    const t = performance.now();
    await room.send(text);
    await waitUntil(() => sdkSeen.has(text) && wsSeen.has(text));
    sdkDelivery.push((sdkSeen.get(text) as number) - t);
    wsDelivery.push((wsSeen.get(text) as number) - t);
  }
  ws.close();
  process.stderr.write('delivery latency measured\n');

  // 3. Webhook in → delivered to a member (b).
  const { agent: bridge } = await createAgent(admin, { name: 'bench-bridge', runtime: 'bridge' });
  await room.invite(bridge.id);
  const hook = await admin.call(gatewayApi.createHook, {
    agent: bridge.id,
    room: room.id,
    template: '{{t}}',
    includeData: false,
  });
  const hookUrl = `${parley.httpUrl}${hook.path}`;
  const wh = new Webhook(hook.secret);
  const hookLatency: number[] = [];
  const hookN = Math.min(N, 200);
  for (let i = 0; i < hookN; i++) {
    const text = `lat:hook:${i}`;
    const b2 = JSON.stringify({ t: text });
    const at = new Date();
    const id = `bench-${i}`;
    const t = performance.now();
    const res = await fetch(hookUrl, {
      method: 'POST',
      body: b2,
      headers: {
        'content-type': 'application/json',
        'webhook-id': id,
        'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
        'webhook-signature': wh.sign(id, at, b2),
      },
    });
    await res.arrayBuffer();
    if (res.status !== 202) throw new Error(`hook HTTP ${res.status}`);
    await waitUntil(() => sdkSeen.has(text));
    hookLatency.push((sdkSeen.get(text) as number) - t);
  }

  const result = {
    n: N,
    sendNats: stats(natsSend),
    sendHttp: stats(httpSend),
    deliverySdk: stats(sdkDelivery),
    deliveryWebSocket: stats(wsDelivery),
    webhookInToMember: stats(hookLatency),
  };
  const r = (x: number) => x.toFixed(2);
  if (args.json) process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  else {
    const row = (name: string, s: { p50: number; p99: number }, base?: { p50: number; p99: number }) =>
      `${name.padEnd(44)} p50 ${r(s.p50).padStart(7)} ms  p99 ${r(s.p99).padStart(7)} ms${
        base ? `   (${(s.p50 / base.p50).toFixed(2)}× / ${(s.p99 / base.p99).toFixed(2)}× the baseline)` : ''
      }`;
    process.stdout.write(
      [
        `gateway bench, ${N} sequential operations each, 512 B text`,
        row('send over NATS (SDK room.send) [baseline]', result.sendNats),
        row('send over HTTP (POST /v1/rooms/<id>/messages)', result.sendHttp, result.sendNats),
        row('delivery to an SDK handler [baseline]', result.deliverySdk),
        row('delivery on /v1/stream (WebSocket)', result.deliveryWebSocket, result.deliverySdk),
        row(`webhook in → member's SDK handler (${hookN})`, result.webhookInToMember),
        '',
      ].join('\n'),
    );
  }
  await reader.close();
  await sender.close();
  await admin.close();
} finally {
  await parley.destroy();
}
