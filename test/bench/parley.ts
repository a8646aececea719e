/**
 * Parley's message path through the SDK, doing the same work as the raw baseline: 100 rooms of 3
 * members (300 agents, each its own connection, creds and durable inbox), 512-byte messages sent by
 * one member of each room through the ingress, fanned out to all 3 members' inboxes, handled in
 * order and acknowledged by each member's SDK.
 */
import { registryApi } from '@parley/contracts';
import { type Agent, connect, type Delivery } from '@parley/sdk';
import type { PipelineResult } from './raw.js';
import { atRate, percentiles, progress, windowed } from './stats.js';

export interface ParleyBenchOptions {
  natsUrl: string;
  adminCreds: string;
  rooms: number;
  membersPerRoom: number;
  payloadBytes: number;
  messages: number;
  latencyRate: number;
  latencySeconds: number;
  window: number;
  /** Wraps the measured phases (throughput and latency), e.g. to count CPU time or profile them. */
  measure?: <T>(fn: () => Promise<T>) => Promise<T>;
}

export interface ParleyBenchResult extends PipelineResult {
  /** Time from `agent create` (registry) to the first message that agent handles. */
  onboardingMs: number;
}

export async function benchParley(o: ParleyBenchOptions): Promise<ParleyBenchResult> {
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
  let latencies: number[] | undefined;
  let onDelivered: (() => void) | undefined;
  const slow: string[] = [];
  // Where the time goes, per delivery: sender → ingress stamp, ingress → inbox store, inbox → handler.
  const stages = { toIngress: [] as number[], toInbox: [] as number[], toHandler: [] as number[] };
  const count = (d: Delivery) => {
    const w = Number(d.message.metadata?.w);
    if (w && d.inboxedAt) {
      const accepted = Date.parse(d.message.sentAt);
      stages.toIngress.push(accepted - w);
      stages.toInbox.push(d.inboxedAt - accepted);
      stages.toHandler.push(Date.now() - d.inboxedAt);
    }
    const t = d.message.metadata?.t;
    if (latencies && t) {
      const ms = performance.now() - Number(t);
      latencies.push(ms);
      // Outliers say where time went: redelivered = the SDK's first copy was never acknowledged.
      if (ms > 5_000 && slow.length < 20) {
        const inboxed = d.inboxedAt ?? 0;
        slow.push(
          `${Math.round(ms)} ms room ${d.room} #${d.roomSeq} redelivered=${d.redelivered}: ingress→inbox ${inboxed - Date.parse(d.message.sentAt)} ms, inbox→handler ${Date.now() - inboxed} ms`,
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

  const measure = o.measure ?? ((fn) => fn());
  const { deliveredPerSec, latencyMs } = await measure(async () => {
    const start = performance.now();
    await windowed(o.messages, o.window, send);
    await waitDelivered(o.messages * o.membersPerRoom);
    const seconds = (performance.now() - start) / 1000;
    const deliveredPerSec = Math.round((o.messages * o.membersPerRoom) / seconds);
    progress(`parley: ${deliveredPerSec} deliveries/s`);
    const fmt = (xs: number[]) => {
      const p = percentiles(xs);
      return `p50 ${p.p50} p99 ${p.p99}`;
    };
    progress(
      `parley: stages (ms) sender→ingress ${fmt(stages.toIngress)} | ingress→inbox ${fmt(stages.toInbox)} | inbox→handler ${fmt(stages.toHandler)}`,
    );

    const before = delivered;
    latencies = [];
    const n = o.latencyRate * o.latencySeconds;
    await atRate(n, o.latencyRate, (i) => void send(i));
    await waitDelivered(before + n * o.membersPerRoom);
    const latencyMs = percentiles(latencies);
    if (slow.length) progress(`parley: slowest deliveries:\n  ${slow.join('\n  ')}`);
    progress(`parley: latency at ${o.latencyRate}/s p50 ${latencyMs.p50} ms p99 ${latencyMs.p99} ms`);
    return { deliveredPerSec, latencyMs };
  });
  await Promise.all(agents.map((a) => a.close()));
  await admin.close();
  return { deliveredPerSec, latencyMs, onboardingMs };
}
