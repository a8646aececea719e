/**
 * Tasks, measured: `pnpm --filter @parley/test bench:tasks [n]`.
 *
 * - task transition latency (the assignee's `start` and `complete` calls: compare-and-set, room
 *   entry, audit record, event), against a baseline in the same run: a `rooms.get` API call (one
 *   KV read behind the same request path);
 * - C's failure → A told: A → B → C, C fails its task; from the `fail` call until A's SDK has the
 *   `task_failed` delivery (the notice travels two levels up);
 * - an approval round trip through the CLI: the held tool call starts → the approver is pinged →
 *   `parley approvals approve` (the CLI in-process, its own connection) → the call returns.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { consentApi, governanceApi, newId, roomsApi } from '@parley/contracts';
import { type Agent, connect, type Delivery } from '@parley/sdk';
import { runCli } from '@parley/sdk/cli';
import { connectAdmin, createAgent, createHuman, createOrg, startParley } from '../harness/index.js';
import { percentiles } from './stats.js';

const n = Number(process.argv[2] ?? 50);
const parley = await startParley({ rooms: { PARLEY_TASK_SWEEP_MS: 500 } });
const fmt = (name: string, values: number[], baseline?: number) => {
  const p = percentiles(values);
  const ratio = baseline ? `  p50 ${(p.p50 / baseline).toFixed(1)}× the baseline` : '';
  return `${name.padEnd(40)} p50 ${p.p50.toFixed(1)} ms  p99 ${p.p99.toFixed(1)} ms  (n=${values.length})${ratio}`;
};
const agents: Agent[] = [];
try {
  const admin = await connectAdmin(parley);
  const org = await createOrg(admin, 'bench-tasks');
  await admin.call(consentApi.setPolicy, { org: org.id, preApproveWithinOrg: true });
  const owner = await createHuman(admin, { org: org.id, name: 'olga' });
  await admin.call(governanceApi.setGrants, { participant: owner.user.id, scopes: ['payments:*'] });
  await admin.call(governanceApi.setOrgPolicy, {
    org: org.id,
    requireApproval: [{ scope: 'payments:*', approver: 'owner' }],
  });
  const olga = await connect({ servers: parley.natsUrl, creds: owner.creds, presence: false });
  agents.push(olga);
  const mk = async (name: string) => {
    const a = await createAgent(olga, { name, scopes: ['payments:*'], visibility: 'org' });
    const agent = await connect({ servers: parley.natsUrl, creds: a.creds, presence: false });
    agents.push(agent);
    return agent;
  };
  const [a, b, c] = [await mk('bench-a'), await mk('bench-b'), await mk('bench-c')] as [Agent, Agent, Agent];
  const room = (await a.rooms.create('bench tasks', { members: [b.id, c.id] })).id;

  // Baseline: a plain API call over the same request path.
  const base: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await a.call(roomsApi.get, { room });
    base.push(performance.now() - t);
  }
  const baseP50 = percentiles(base).p50;

  const create: number[] = [];
  const start: number[] = [];
  const complete: number[] = [];
  for (let i = 0; i < n; i++) {
    let t = performance.now();
    const task = await a.tasks.create(room, { assignee: b.id, goal: `job ${i}` });
    create.push(performance.now() - t);
    t = performance.now();
    await b.tasks.start(task.id);
    start.push(performance.now() - t);
    t = performance.now();
    await b.tasks.complete(task.id, { i });
    complete.push(performance.now() - t);
  }

  const told = new Map<string, (d: Delivery) => void>();
  a.on('task_failed', (d) => {
    const n = d.taskNotice;
    if (n) told.get(n.task)?.(d);
  });
  await a.listening;
  const travel: number[] = [];
  for (let i = 0; i < Math.min(n, 30); i++) {
    const t1 = await a.tasks.create(room, { assignee: b.id, goal: `chain ${i}` });
    await b.tasks.start(t1.id);
    const t2 = await b.tasks.create(room, { assignee: c.id, goal: `part ${i}`, parent: t1.id });
    await c.tasks.start(t2.id);
    const heard = new Promise<void>((resolve) => told.set(t2.id, () => resolve()));
    const t = performance.now();
    await c.tasks.fail(t2.id, 'bench failure');
    await heard;
    travel.push(performance.now() - t);
  }

  const credsFile = join(parley.home.paths.credsDir, 'bench-olga.creds');
  await writeFile(credsFile, owner.creds, { mode: 0o600 });
  const pinged = new Map<string, () => void>();
  olga.on('approval_requested', (d) => {
    if (d.approval) pinged.get(d.approval.id)?.();
  });
  await olga.listening;
  const roundTrip: number[] = [];
  const cliPart: number[] = [];
  const quiet = { out: () => undefined, err: (l: string) => console.error(l) };
  for (let i = 0; i < Math.min(n, 15); i++) {
    const id = newId('toolCall');
    const ping = new Promise<void>((resolve) => pinged.set(id, resolve));
    const t = performance.now();
    const call = c.tools.call('payments.charge', { i }, () => i, { action: 'payments:charge', id });
    await ping;
    const u = performance.now();
    const code = await runCli(
      ['approvals', 'approve', id, '--reason', 'bench', '--as', credsFile, '--server', parley.natsUrl],
      quiet,
    );
    if (code !== 0) throw new Error('approve failed');
    cliPart.push(performance.now() - u);
    await call;
    roundTrip.push(performance.now() - t);
  }

  console.log(fmt('baseline: rooms.get', base));
  console.log(fmt('tasks.create', create, baseP50));
  console.log(fmt('transition submitted → working', start, baseP50));
  console.log(fmt('transition working → completed', complete, baseP50));
  console.log(fmt('C fails → A told (2 levels up)', travel, baseP50));
  console.log(fmt('approval round trip via the CLI', roundTrip, baseP50));
  console.log(fmt('  of which parley approvals approve', cliPart));
  await admin.close();
} finally {
  await Promise.allSettled(agents.map((x) => x.close()));
  await parley.destroy();
}
