/**
 * What the send guards cost the ingress, in the same run (interleaved rounds, medians):
 *
 * - `none`       no guards at all (PARLEY_SEND_GUARDS=false): the baseline;
 * - `idle`       the guards run, rate limits off, no token: their fast paths;
 * - `limits`     per-agent and per-room token buckets on (limits never reached);
 * - `delegation` limits on, and every send carries a delegation token (verified from the cache,
 *                stamped on the message).
 *
 * 1. CPU: each configuration's guards called directly, ns per send.
 * 2. End to end: a rooms ingress in this process (the control plane and fan-out run in the test
 *    backbone), sequential sends (latency) and 64 in flight (throughput).
 *
 * Run: pnpm --filter @parley/test bench:guards
 */
import { Kvm } from '@nats-io/kv';
import { buckets, governanceApi, type RoomMessage } from '@parley/contracts';
import { connectNats, createDelegationVerifier, silentLogger } from '@parley/kit';
import { createRoomsService, defaultConfig } from '@parley/rooms';
import { delegationGuard, rateLimitGuard, roomPausedGuard } from '@parley/rooms/internal';
import type { Agent } from '@parley/sdk';
import {
  connectAdmin,
  connectTo,
  createAgent,
  createHuman,
  createOrg,
  startParley,
} from '../harness/index.js';
import { percentiles, progress } from './stats.js';

type Mode = 'none' | 'idle' | 'limits' | 'delegation';
const MODES: Mode[] = ['none', 'idle', 'limits', 'delegation'];
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SEQ = Number(process.env.BENCH_SEQ_SENDS ?? 1_000);
const PAR = Number(process.env.BENCH_PAR_SENDS ?? 4_000);
const IN_FLIGHT = 64;
const CPU = Number(process.env.BENCH_CPU_CALLS ?? 200_000);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;

const parley = await startParley({ rooms: { PARLEY_INGRESS: false } });
const log = silentLogger();
try {
  const admin = await connectAdmin(parley);
  const org = await createOrg(admin, `bench-${Date.now()}`);
  const human = await createHuman(admin, { org: org.id, name: 'bench-human' });
  await admin.call(governanceApi.setGrants, { participant: human.user.id, scopes: ['bench:*'] });
  const person = await connectTo(parley, human.creds);
  const bot = await createAgent(person, { name: 'bench-bot', scopes: ['bench:*'] });
  const agent: Agent = await connectTo(parley, bot.creds);
  const room = await person.rooms.create('bench', { members: [bot.agent.id] });
  const { token } = await person.tokens.issue(bot.agent.id, ['bench:read'], { ttlSeconds: 3600 });
  const serviceCreds = new TextEncoder().encode(await parley.serviceCreds('rooms'));

  const config = (mode: Mode) =>
    defaultConfig({
      PARLEY_FANOUT: false,
      PARLEY_REPLICA_ID: `bench-${mode}`,
      PARLEY_SEND_GUARDS: mode !== 'none',
      PARLEY_RATE_AGENT_PER_SEC: mode === 'limits' || mode === 'delegation' ? 1e6 : 0,
      PARLEY_RATE_AGENT_BURST: 1e6,
      PARLEY_RATE_ROOM_PER_SEC: mode === 'limits' || mode === 'delegation' ? 1e6 : 0,
      PARLEY_RATE_ROOM_BURST: 1e6,
      PARLEY_RUNAWAY_MESSAGES: 0,
    });

  async function endToEnd(mode: Mode): Promise<{ p50: number; p99: number; perSec: number }> {
    const nc = await connectNats({
      servers: parley.natsUrl,
      name: `bench-${mode}`,
      principal: 'svc_rooms',
      creds: serviceCreds,
    });
    const rooms = createRoomsService({ nc, log, config: config(mode) });
    await rooms.start();
    const r = agent.rooms.room(room.id);
    const options = mode === 'delegation' ? { delegation: token } : {};
    try {
      for (let i = 0; i < 50; i++) await r.send(`warm ${i}`, options);
      const latencies: number[] = [];
      for (let i = 0; i < SEQ; i++) {
        const t = performance.now();
        await r.send(`s${i}`, options);
        latencies.push(performance.now() - t);
      }
      let next = 0;
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: IN_FLIGHT }, async () => {
          while (next < PAR) {
            next++;
            await r.send('p', options);
          }
        }),
      );
      const perSec = PAR / ((performance.now() - t0) / 1000);
      const p = percentiles(latencies);
      return { p50: p.p50, p99: p.p99, perSec };
    } finally {
      await rooms.stop();
      await nc.drain();
    }
  }

  /** The guards of a mode, called directly: ns per send (what the ingress adds per message). */
  async function cpu(mode: Mode): Promise<number> {
    if (mode === 'none') return 0;
    const nc = await connectNats({
      servers: parley.natsUrl,
      name: 'bench-cpu',
      principal: 'svc_rooms',
      creds: serviceCreds,
    });
    const policyKv = await new Kvm(nc).open(buckets.policy);
    const verifier = await createDelegationVerifier(policyKv, log);
    const limits = mode === 'idle' ? 0 : 1e6;
    const guards = [
      roomPausedGuard(),
      rateLimitGuard({
        agent: { ratePerSec: limits, burst: 1e6 },
        room: { ratePerSec: limits, burst: 1e6 },
        replicas: { count: () => 1, onChange: () => undefined },
      }),
      delegationGuard({
        verifier,
        policy: { check: () => undefined, get: () => undefined, stop: () => undefined },
        js: undefined as never,
        log,
      }),
    ];
    const send = {
      sender: bot.agent.id,
      room: { id: room.id, paused: false } as never,
      request: { ...(mode === 'delegation' ? { delegation: token } : {}) } as never,
    };
    let stamped: Pick<RoomMessage, 'onBehalfOf'> | undefined;
    // As the ingress does: only promises are awaited.
    const admit = async () => {
      let facts: Pick<RoomMessage, 'onBehalfOf'> | undefined;
      for (const g of guards) {
        const r = g.admit(send);
        facts = (r instanceof Promise ? await r : r) ?? facts;
      }
      return facts;
    };
    for (let i = 0; i < 1_000; i++) stamped = (await admit()) ?? stamped;
    const t = process.hrtime.bigint();
    for (let i = 0; i < CPU; i++) await admit();
    const ns = Number(process.hrtime.bigint() - t) / CPU;
    verifier.stop();
    await nc.drain();
    if (mode === 'delegation' && !stamped) throw new Error('the delegation guard stamped nothing');
    return ns;
  }

  const results = new Map<Mode, { p50: number[]; p99: number[]; perSec: number[]; ns: number[] }>();
  for (const m of MODES) results.set(m, { p50: [], p99: [], perSec: [], ns: [] });
  for (let round = 1; round <= ROUNDS; round++) {
    for (const mode of MODES) {
      progress(`round ${round}/${ROUNDS}: ${mode}`);
      const r = results.get(mode) as NonNullable<ReturnType<typeof results.get>>;
      r.ns.push(await cpu(mode));
      const e = await endToEnd(mode);
      r.p50.push(e.p50);
      r.p99.push(e.p99);
      r.perSec.push(e.perSec);
    }
  }
  const base = median(results.get('none')?.perSec ?? []);
  console.log(
    `send guards, ${ROUNDS} interleaved rounds, medians (sequential ${SEQ} sends; ${PAR} sends ${IN_FLIGHT} in flight)`,
  );
  console.log('| guards | CPU per send | p50 | p99 | sends/s | vs none |');
  console.log('| --- | --- | --- | --- | --- | --- |');
  for (const mode of MODES) {
    const r = results.get(mode) as NonNullable<ReturnType<typeof results.get>>;
    const perSec = median(r.perSec);
    console.log(
      `| ${mode} | ${mode === 'none' ? '–' : `${Math.round(median(r.ns))} ns`} | ${median(r.p50).toFixed(2)} ms | ${median(r.p99).toFixed(2)} ms | ${Math.round(perSec)} | ${((perSec / base) * 100).toFixed(0)}% |`,
    );
  }
  await agent.close();
  await person.close();
  await admin.close();
} finally {
  await parley.destroy();
}
