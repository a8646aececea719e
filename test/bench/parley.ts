/**
 * Parley's message path through the SDK, doing the same work as the raw baseline: 100 rooms of 3
 * members (300 agents, each its own connection, creds and durable push inbox), 512-byte messages
 * sent by one member of each room through the ingress, fanned out to all 3 members' inboxes,
 * handled in order and acknowledged by each member's SDK.
 */
import { registryApi } from '@parley/contracts';
import { type Agent, connect, type Delivery } from '@parley/sdk';
import type { Pipeline } from './raw.js';
import { atRate, LatencyRecorder, progress, tail, windowed } from './stats.js';

export interface ParleyBenchOptions {
  natsUrl: string;
  adminCreds: string;
  rooms: number;
  membersPerRoom: number;
  payloadBytes: number;
  window: number;
}

/** The pipeline, and the onboarding time measured while setting it up. */
export interface ParleyPipeline extends Pipeline {
  /** Time from `agent create` (registry) to the first message that agent handles. */
  onboardingMs: number;
}

export async function setupParley(o: ParleyBenchOptions): Promise<ParleyPipeline> {
  const admin = await connect({ servers: o.natsUrl, creds: o.adminCreds, presence: false });
  // Onboarding: a new agent, from create to its first handled message.
  const t0 = performance.now();
  const created = await admin.call(registryApi.createAgent, { card: { name: 'onboarding-probe' } });
  const probe = await connect({ servers: o.natsUrl, creds: created.credentials.creds, presence: false });
  const first = new Promise<number>((resolve) => {
    probe.on('message', () => resolve(performance.now()));
  });
  await probe.listening;
  const welcome = await admin.rooms.create('welcome', { members: [created.agent.id] });
  await welcome.send('welcome aboard');
  const onboardingMs = Math.round((await first) - t0);
  await probe.close();
  progress(`parley: onboarding (agent create → first message handled) ${onboardingMs} ms`);

  const agents: Agent[] = [];
  const rooms: { id: string; sender: Agent }[] = [];
  let delivered = 0;
  let recorder: LatencyRecorder | undefined;
  let onDelivered: (() => void) | undefined;
  const slow: string[] = [];
  // Where the time goes, per delivery: sender → ingress stamp, ingress → inbox store, inbox → handler
  // (in two: the server's push until the agents' process read it, then the SDK until the handler).
  let stages:
    | { toIngress: number[]; toInbox: number[]; toHandler: number[]; toClient: number[]; inClient: number[] }
    | undefined;
  const count = (d: Delivery) => {
    const t = d.message.metadata?.t;
    const now = performance.now();
    if (recorder && t && recorder.record(Number(t), now)) {
      const ms = now - Number(t);
      const w = Number(d.message.metadata?.w);
      if (stages && w && d.inboxedAt) {
        const accepted = Date.parse(d.message.sentAt);
        stages.toIngress.push(accepted - w);
        stages.toInbox.push(d.inboxedAt - accepted);
        const wall = Date.now();
        stages.toHandler.push(wall - d.inboxedAt);
        if (d.receivedAt) {
          stages.toClient.push(d.receivedAt - d.inboxedAt);
          stages.inClient.push(wall - d.receivedAt);
        }
      }
      // Outliers say where time went: redelivered = the SDK's first copy was never acknowledged.
      if (ms > 1_000 && slow.length < 20) {
        const inboxed = d.inboxedAt ?? 0;
        const received = d.receivedAt ?? 0;
        slow.push(
          `${Math.round(ms)} ms room ${d.room} #${d.roomSeq} redelivered=${d.redelivered}: ingress→inbox ${inboxed - Date.parse(d.message.sentAt)} ms, inbox→received ${received - inboxed} ms, received→handler ${Date.now() - received} ms`,
        );
      }
    }
    delivered++;
    onDelivered?.();
  };
  progress(`parley: registering ${o.rooms * o.membersPerRoom} agents and ${o.rooms} rooms`);
  await windowed(o.rooms, 8, async (r) => {
    const members: Agent[] = [];
    for (let i = 0; i < o.membersPerRoom; i++) {
      const c = await admin.call(registryApi.createAgent, { card: { name: `bench-${r}-${i}` } });
      const agent = await connect({
        servers: o.natsUrl,
        creds: c.credentials.creds,
        presence: false,
        delivery: { includeOwn: true },
      });
      agent.on('message', count);
      members.push(agent);
    }
    agents.push(...members);
    const [owner, ...rest] = members as [Agent, ...Agent[]];
    const room = await owner.rooms.create(`bench ${r}`, { members: rest.map((m) => m.id) });
    rooms.push({ id: room.id, sender: owner });
  });
  await Promise.all(agents.map((a) => a.listening));
  // Each member also got its room's membership events (room events are not counted above).

  const payload = 'x'.repeat(o.payloadBytes);
  const send = (i: number) => {
    const r = rooms[i % rooms.length];
    if (!r) throw new Error('no room');
    return r.sender.rooms
      .room(r.id)
      .send(payload, { metadata: { t: String(performance.now()), w: String(Date.now()) } });
  };
  const waitDelivered = (n: number) =>
    new Promise<void>((resolve) => {
      if (delivered >= n) return resolve();
      onDelivered = () => {
        if (delivered >= n) {
          onDelivered = undefined;
          resolve();
        }
      };
    });

  return {
    onboardingMs,
    async throughput(messages) {
      const before = delivered;
      const start = performance.now();
      await windowed(messages, o.window, send);
      await waitDelivered(before + messages * o.membersPerRoom);
      const perSec = Math.round((messages * o.membersPerRoom) / ((performance.now() - start) / 1000));
      progress(`parley: ${perSec} deliveries/s`);
      return perSec;
    },
    async latency(ratePerSec, seconds, { warmupSeconds = 0 } = {}) {
      const before = delivered;
      const r = new LatencyRecorder(performance.now() + warmupSeconds * 1000);
      recorder = r;
      stages = { toIngress: [], toInbox: [], toHandler: [], toClient: [], inClient: [] };
      slow.length = 0;
      const n = Math.round(ratePerSec * (warmupSeconds + seconds));
      await atRate(n, ratePerSec, (i) => void send(i));
      await waitDelivered(before + n * o.membersPerRoom);
      recorder = undefined;
      const endToEnd = tail(r.latencies);
      const byStage = {
        senderToIngress: tail(stages.toIngress),
        ingressToInbox: tail(stages.toInbox),
        inboxToHandler: tail(stages.toHandler),
        inboxToReceived: tail(stages.toClient),
        receivedToHandler: tail(stages.inClient),
      };
      stages = undefined;
      if (slow.length) progress(`parley: slowest deliveries:\n  ${slow.join('\n  ')}`);
      progress(
        `parley: at ${ratePerSec}/s p50 ${endToEnd.p50} p99 ${endToEnd.p99} p99.9 ${endToEnd.p999} max ${endToEnd.max} ms; stages p99 (ms) ${byStage.senderToIngress.p99} | ${byStage.ingressToInbox.p99} | ${byStage.inboxToHandler.p99} (${byStage.inboxToReceived.p99} + ${byStage.receivedToHandler.p99})`,
      );
      return { endToEnd, stages: byStage, series: r.series() };
    },
    async close() {
      await Promise.all(agents.map((a) => a.close()));
      await admin.close();
    },
  };
}
