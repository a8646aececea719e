/**
 * The consent round trip, measured: `npx tsx --conditions=@parley/source test/bench/consent.ts [pairs]`.
 *
 * For each pair of agents of different owners (in different orgs): request → the target's SDK has
 * the `contact_request` → accept → invite into a room the requester owns. The first request to an
 * agent also creates its notice room; a second round (revoke, request again) measures the same with
 * the notice room in place. Then the `consent.check` rooms asks before each invite, on its own.
 */
import { performance } from 'node:perf_hooks';
import { consentApi, request } from '@parley/contracts';
import type { Agent, Delivery } from '@parley/sdk';
import {
  connectAdmin,
  connectService,
  connectTo,
  createAgent,
  createHuman,
  createOrg,
  startParley,
} from '../harness/index.js';
import { percentiles } from './stats.js';

const pairs = Number(process.argv[2] ?? 20);
const parley = await startParley();
const fmt = (name: string, values: number[]) => {
  const p = percentiles(values);
  return `${name.padEnd(34)} p50 ${p.p50.toFixed(1)} ms  p95 ${p.p95.toFixed(1)} ms  (n=${values.length})`;
};
try {
  const admin = await connectAdmin(parley);
  const other = await createOrg(admin, 'bench-partner');
  const a = await connectTo(
    parley,
    (await createHuman(admin, { org: parley.home.state.org.id, name: 'ann' })).creds,
  );
  const b = await connectTo(parley, (await createHuman(admin, { org: other.id, name: 'bob' })).creds);
  const agents: { asker: Agent; target: Agent; targetId: string; notices: ((d: Delivery) => void)[] }[] = [];
  for (let i = 0; i < pairs; i++) {
    const x = await createAgent(a, { name: `asker-${i}`, visibility: 'public' });
    const y = await createAgent(b, { name: `target-${i}`, visibility: 'public' });
    const asker = await connectTo(parley, x.creds);
    const target = await connectTo(parley, y.creds);
    const entry = { asker, target, targetId: y.agent.id, notices: [] as ((d: Delivery) => void)[] };
    target.on('contact_request', (d) => {
      for (const resolve of entry.notices.splice(0)) resolve(d);
    });
    await target.listening;
    agents.push(entry);
  }
  const rounds: Record<string, number[]>[] = [];
  for (const round of ['first request (creates the notice room)', 'second request (notice room exists)']) {
    const t = {
      notice: [] as number[],
      accept: [] as number[],
      invite: [] as number[],
      total: [] as number[],
    };
    for (const p of agents) {
      const room = await p.asker.rooms.create(`bench ${round}`);
      const noticed = new Promise<Delivery>((resolve) => p.notices.push(resolve));
      const t0 = performance.now();
      await p.asker.contacts.request(p.targetId, { reason: 'bench' });
      const d = await noticed;
      const t1 = performance.now();
      await p.target.contacts.accept(d.contactRequest?.id as string);
      const t2 = performance.now();
      await room.invite(p.targetId);
      const t3 = performance.now();
      t.notice.push(t1 - t0);
      t.accept.push(t2 - t1);
      t.invite.push(t3 - t2);
      t.total.push(t3 - t0);
      await p.target.contacts.revoke(p.asker.id);
    }
    process.stdout.write(
      `${[
        round,
        fmt('  request → contact_request in SDK', t.notice),
        fmt('  accept', t.accept),
        fmt('  invite (with consent.check)', t.invite),
        fmt('  request → invite accepted', t.total),
      ].join('\n')}\n`,
    );
    rounds.push(t);
  }
  const svc = await connectService(parley);
  const checks: number[] = [];
  const [first] = agents;
  if (first) {
    for (let i = 0; i < 300; i++) {
      const t0 = performance.now();
      await request(svc, 'svc_test', consentApi.check, { a: first.asker.id, b: first.targetId });
      checks.push(performance.now() - t0);
    }
  }
  process.stdout.write(`${fmt('consent.check (warm caches)', checks.slice(50))}\n`);
  await svc.close();
  await Promise.allSettled([
    admin.close(),
    a.close(),
    b.close(),
    ...agents.flatMap((p) => [p.asker.close(), p.target.close()]),
  ]);
} finally {
  await parley.destroy();
}
