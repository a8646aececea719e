/**
 * Tasks and failure semantics against a real backbone: A → B → C, where C fails after a side
 * effect (B and A told with the reason, the compensation runs once, the audit shows who decided
 * what); a cancel of A's task cascades down; a deadline fails a task and cascades; a retried side
 * effect with the same key runs once, also across a kill -9 of the process that made it; a lease
 * lets the requester reassign; illegal transitions are refused with a code and change nothing.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { NatsConnection } from '@nats-io/transport-node';
import { governanceApi, roomsApi, type TaskNotice } from '@parley/contracts';
import { transitionOf } from '@parley/sdk';
import { connectService, startParley, type TestParley, waitFor } from '@parley/test/harness';
import { auditRecords, codeOf, createWorld, type Member } from './fixtures/governance.js';

describe('tasks', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  let world: Awaited<ReturnType<typeof createWorld>>;
  let a: Member;
  let b: Member;
  let c: Member;
  let room: string;
  let lead: Member;
  const notices: Record<string, TaskNotice[]> = {};
  const noticesOf = (m: Member, task: string) => (notices[m.id] ?? []).filter((n) => n.task === task);

  before(async () => {
    parley = await startParley({ rooms: { PARLEY_TASK_SWEEP_MS: 100 } });
    svc = await connectService(parley);
    world = await createWorld(parley);
    lead = await world.person('task-lead', ['payments:*'], { listen: false });
    a = await world.agentOf(lead, 'requester-a', ['payments:*']);
    b = await world.agentOf(lead, 'worker-b', ['payments:*']);
    c = await world.agentOf(lead, 'worker-c', ['payments:*']);
    for (const m of [a, b, c]) {
      notices[m.id] = [];
      for (const event of ['task_failed', 'task_canceled', 'task_lease_expired'] as const) {
        m.agent.on(event, (d) => {
          if (d.taskNotice) notices[m.id]?.push(d.taskNotice);
        });
      }
      await m.agent.listening;
    }
    room = (await a.agent.rooms.create('task chain', { members: [b.id, c.id] })).id;
  });
  after(async () => {
    await world?.close();
    await svc?.close();
    await parley?.destroy();
  });

  it('C fails after a side effect: B and A are told why, the compensation runs once, the audit shows who decided', async () => {
    const t1 = await a.agent.tasks.create(room, { assignee: b.id, goal: 'book the trip' });
    assert.equal(t1.state, 'submitted');
    await b.agent.tasks.start(t1.id);
    const t2 = await b.agent.tasks.create(room, { assignee: c.id, goal: 'pay the hotel', parent: t1.id });
    assert.deepEqual((await a.agent.tasks.get(t1.id)).children, [t2.id]);
    await c.agent.tasks.start(t2.id);
    let charged = 0;
    let refunded: unknown[] = [];
    const receipt = await c.agent.tools.call(
      'payments.charge',
      { amount: 120 },
      () => {
        charged++;
        return { receipt: 'r-1' };
      },
      {
        task: t2.id,
        idempotencyKey: 'hotel-deposit',
        action: 'payments:charge',
        compensate: (r) => {
          refunded = [...refunded, r];
        },
      },
    );
    assert.deepEqual(receipt, { receipt: 'r-1' });

    const failed = await c.agent.tasks.fail(t2.id, 'the hotel refused the booking');
    assert.equal(failed.state, 'failed');
    await waitFor(
      () => noticesOf(b, t2.id).length === 1 && noticesOf(a, t2.id).length === 1,
      'B and A to be told',
    );
    const [toB] = noticesOf(b, t2.id);
    const [toA] = noticesOf(a, t2.id);
    assert.equal(toB?.event, 'task_failed');
    assert.equal(toB?.role, 'requester');
    assert.equal(toB?.reason, 'the hotel refused the booking');
    assert.equal(toB?.by, c.id);
    assert.equal(toA?.role, 'ancestor');
    assert.deepEqual(toA?.path, [t2.id, t1.id]);
    assert.equal(toA?.reason, 'the hotel refused the booking');
    assert.equal(noticesOf(c, t2.id).length, 0, 'the one who failed it is not told');

    assert.equal(charged, 1);
    assert.deepEqual(refunded, [{ receipt: 'r-1' }], 'compensated with what the side effect returned');
    // Another compensation run (a second process, a redelivered notice) finds it done.
    assert.deepEqual(await c.agent.tasks.compensate(t2.id), []);
    assert.equal(refunded.length, 1);
    const shown = await a.agent.tasks.get(t2.id);
    assert.equal(shown.sideEffects.length, 1);
    assert.equal(shown.sideEffects[0]?.state, 'done');
    assert.equal(shown.sideEffects[0]?.compensation?.state, 'done');
    assert.equal(shown.sideEffects[0]?.compensation?.by, c.id);
    // The parent is B's to decide on: still working.
    assert.equal((await a.agent.tasks.get(t1.id)).state, 'working');

    await waitFor(
      async () => (await auditRecords(svc, 'task')).filter((r) => r.target === t2.id).length >= 6,
      'the audit of the task',
    );
    const audit = (await auditRecords(svc, 'task'))
      .filter((r) => r.target === t2.id)
      .map((r) => [r.action, r.actor, r.data?.reason]);
    assert.deepEqual(audit, [
      ['create', b.id, undefined],
      ['working', c.id, undefined],
      ['side_effect', c.id, undefined],
      ['failed', c.id, 'the hotel refused the booking'],
      ['compensation_started', c.id, undefined],
      ['compensation_done', c.id, undefined],
    ]);

    // Every transition is a room message written by Parley, in order.
    const history = await a.agent.call(roomsApi.history, { room, order: 'oldest', limit: 200 });
    const transitions = history.entries
      .map((e) => transitionOf({ message: e.message } as never))
      .filter((t) => t?.task === t2.id)
      .map((t) => [t?.from, t?.to, t?.by]);
    assert.deepEqual(transitions, [
      [undefined, 'submitted', b.id],
      ['submitted', 'working', c.id],
      ['working', 'failed', c.id],
    ]);
  });

  it('refuses illegal and unauthorized transitions with a code, and changes nothing', async () => {
    const t = await a.agent.tasks.create(room, { assignee: b.id, goal: 'write the summary' });
    assert.equal(await codeOf(a.agent.tasks.start(t.id)), 'PERMISSION_DENIED', 'only the assignee works');
    assert.equal(
      await codeOf(b.agent.tasks.cancel(t.id, 'no')),
      'PERMISSION_DENIED',
      'only the requester cancels',
    );
    const working = await b.agent.tasks.start(t.id);
    assert.equal(
      await codeOf(b.agent.tasks.transition(t.id, 'completed', { expectedRevision: t.revision })),
      'CONFLICT',
      'a stale revision',
    );
    const done = await b.agent.tasks.complete(
      t.id,
      { summary: 'ok' },
      { expectedRevision: working.revision },
    );
    assert.equal(done.state, 'completed');
    assert.equal(await codeOf(b.agent.tasks.start(t.id)), 'ILLEGAL_TRANSITION');
    assert.equal(await codeOf(a.agent.tasks.cancel(t.id, 'too late')), 'ILLEGAL_TRANSITION');
    const after = await a.agent.tasks.get(t.id);
    assert.equal(after.state, 'completed');
    assert.equal(after.revision, done.revision);
    assert.deepEqual(after.result, { summary: 'ok' });
    const outsider = await world.agentOf(
      await world.person('outsider', [], { listen: false }),
      'outsider-bot',
      [],
    );
    assert.equal(await codeOf(outsider.agent.tasks.get(t.id)), 'NOT_FOUND', 'invisible to a non-member');
    assert.equal(
      await codeOf(a.agent.tasks.create(room, { assignee: outsider.id, goal: 'x' })),
      'NOT_A_MEMBER',
    );
    assert.equal(
      await codeOf(c.agent.tasks.create(room, { assignee: a.id, goal: 'x', parent: t.id })),
      'PERMISSION_DENIED',
      'only the parent’s assignee delegates part of it',
    );
    const listed = await a.agent.tasks.list({ room, state: ['completed'] });
    assert.ok(listed.some((x) => x.id === t.id));
  });

  it('a cancel of A’s task cascades to B’s and C’s, and C’s side effect is compensated', async () => {
    const t1 = await a.agent.tasks.create(room, { assignee: b.id, goal: 'plan the offsite' });
    await b.agent.tasks.start(t1.id);
    const t2 = await b.agent.tasks.create(room, { assignee: c.id, goal: 'reserve the venue', parent: t1.id });
    await c.agent.tasks.start(t2.id);
    const t3 = await c.agent.tasks.create(room, { assignee: a.id, goal: 'approve the menu', parent: t2.id });
    let refunds = 0;
    await c.agent.tools.call('payments.charge', { amount: 300 }, () => ({ receipt: 'venue' }), {
      task: t2.id,
      idempotencyKey: 'venue-deposit',
      action: 'payments:charge',
      compensate: () => {
        refunds++;
      },
    });
    await a.agent.tasks.cancel(t1.id, 'offsite moved online');
    await waitFor(
      async () => (await a.agent.tasks.get(t3.id)).state === 'canceled',
      'the grandchild canceled',
    );
    const [s1, s2, s3] = await Promise.all([t1, t2, t3].map((t) => a.agent.tasks.get(t.id)));
    assert.equal(s1?.state, 'canceled');
    assert.equal(s2?.state, 'canceled');
    assert.match(s2?.reason ?? '', new RegExp(`parent task ${t1.id} canceled: offsite moved online`));
    assert.match(s3?.reason ?? '', new RegExp(`parent task ${t2.id} canceled`));
    // Each assignee below is told (to stop and compensate), with where it started.
    await waitFor(
      () => noticesOf(b, t1.id).length === 1 && noticesOf(c, t2.id).length === 1 && refunds === 1,
      'B and C told, C compensated',
    );
    assert.equal(noticesOf(c, t2.id)[0]?.origin, t1.id);
    assert.equal(noticesOf(c, t2.id)[0]?.role, 'assignee');
    await waitFor(
      async () => (await a.agent.tasks.get(t2.id)).sideEffects[0]?.compensation?.state === 'done',
      'the compensation recorded',
    );
    assert.equal(refunds, 1);
  });

  it('a passed deadline fails the task with DEADLINE_EXCEEDED and cascades to its children', async () => {
    const t1 = await a.agent.tasks.create(room, { assignee: b.id, goal: 'answer by noon', deadline: 1_500 });
    await b.agent.tasks.start(t1.id);
    const t2 = await b.agent.tasks.create(room, {
      assignee: c.id,
      goal: 'find the numbers',
      parent: t1.id,
      deadline: 3_600_000,
    });
    assert.equal(t2.deadline, t1.deadline, 'a child never outlives its parent');
    await waitFor(async () => (await a.agent.tasks.get(t1.id)).state === 'failed', 'the deadline to fail it');
    const s1 = await a.agent.tasks.get(t1.id);
    assert.equal(s1.code, 'DEADLINE_EXCEEDED');
    await waitFor(async () => (await a.agent.tasks.get(t2.id)).state === 'canceled', 'the child canceled');
    assert.equal((await a.agent.tasks.get(t2.id)).code, 'DEADLINE_EXCEEDED');
    await waitFor(
      () =>
        noticesOf(a, t1.id).length === 1 &&
        noticesOf(b, t1.id).length === 1 &&
        noticesOf(c, t2.id).length === 1,
      'the requester, the assignee and the child’s assignee told',
    );
    assert.equal(noticesOf(a, t1.id)[0]?.code, 'DEADLINE_EXCEEDED');
    assert.equal(noticesOf(a, t1.id)[0]?.event, 'task_failed');
  });

  it('a side effect retried with the same key runs once, also after a kill -9 of the process that made it', async () => {
    const t = await a.agent.tasks.create(room, { assignee: c.id, goal: 'charge the card once' });
    await c.agent.tasks.start(t.id);
    let runs = 0;
    const call = () =>
      c.agent.tools.call('payments.charge', { amount: 7 }, () => ({ run: ++runs }), {
        task: t.id,
        idempotencyKey: 'charge-7',
        action: 'payments:charge',
      });
    assert.deepEqual(await call(), { run: 1 });
    assert.deepEqual(await call(), { run: 1 }, 'the recorded result');
    assert.equal(runs, 1);

    const dir = await mkdtemp(join(tmpdir(), 'parley-effect-'));
    try {
      const file = join(dir, 'charges.log');
      const child = spawn(process.execPath, ['test/integration/fixtures/side-effect-process.ts'], {
        cwd: resolve(import.meta.dirname, '../..'),
        stdio: ['ignore', 'pipe', 'pipe'],
        env: {
          ...process.env,
          NATS_URL: parley.natsUrl,
          CREDS: c.creds,
          TASK: t.id,
          IDEMPOTENCY_KEY: 'charge-42',
          RECORD_FILE: file,
        },
      });
      const exited = new Promise<void>((r) => child.once('exit', () => r()));
      let out = '';
      child.stdout.on('data', (d) => {
        out += d;
      });
      child.stderr.on('data', (d) => {
        out += d;
      });
      await waitFor(
        () => out.includes('recorded') || child.exitCode !== null,
        () => `the process to record its side effect: ${out}`,
        60_000,
      );
      assert.match(out, /recorded \{"receipt":"rcpt-\d+"\}/);
      child.kill('SIGKILL');
      await exited;
      const receipt = JSON.parse(out.slice(out.indexOf('{'), out.indexOf('}') + 1));
      let again = 0;
      const replayed = await c.agent.tools.call(
        'payments.charge',
        { amount: 42 },
        () => {
          again++;
          return { receipt: 'a second charge' };
        },
        { task: t.id, idempotencyKey: 'charge-42', action: 'payments:charge' },
      );
      assert.deepEqual(replayed, receipt, 'the result the killed process recorded');
      assert.equal(again, 0, 'the side effect did not run again');
      assert.equal(await readFile(file, 'utf8'), 'charged 42\n');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('an assignee silent past its lease lets the requester reassign (not before)', async () => {
    const held = await a.agent.tasks.create(room, { assignee: b.id, goal: 'long job', leaseMs: 3_600_000 });
    assert.equal(await codeOf(a.agent.tasks.reassign(held.id, c.id)), 'CONFLICT');
    const t = await a.agent.tasks.create(room, { assignee: b.id, goal: 'quick job', leaseMs: 1_000 });
    await waitFor(
      () => noticesOf(a, t.id).some((n) => n.event === 'task_lease_expired'),
      'the lease to pass',
    );
    const moved = await a.agent.tasks.reassign(t.id, c.id);
    assert.equal(moved.assignee, c.id);
    assert.equal(moved.state, 'submitted');
    assert.equal(await codeOf(b.agent.tasks.start(t.id)), 'PERMISSION_DENIED', 'the old assignee is out');
    assert.equal((await c.agent.tasks.start(t.id)).state, 'working');
  });

  it('cost is counted per task and binding; past its budget the task fails with BUDGET_EXCEEDED, cascading', async () => {
    const t1 = await a.agent.tasks.create(room, {
      assignee: b.id,
      goal: 'research within budget',
      budgetUsd: 1,
    });
    await b.agent.tasks.start(t1.id);
    const t2 = await b.agent.tasks.create(room, { assignee: c.id, goal: 'sub-research', parent: t1.id });
    const report = { model: 'm', inputTokens: 100, outputTokens: 10, costUsd: 0.6, task: t1.id };
    assert.deepEqual(await b.agent.usage.report({ ...report, binding: 'langgraph:thread-1' }), {
      counted: true,
      exceeded: [],
    });
    assert.equal((await a.agent.tasks.get(t1.id)).costUsd, 0.6);
    assert.equal(
      await codeOf(c.agent.usage.report({ ...report, costUsd: 5 })),
      'PERMISSION_DENIED',
      'only who works on it or asked for it charges a task',
    );
    const over = await b.agent.usage.report({ ...report, binding: 'langgraph:thread-1' });
    assert.deepEqual(over.exceeded, ['task budget']);
    const failed = await a.agent.tasks.get(t1.id);
    assert.deepEqual([failed.state, failed.code, failed.costUsd], ['failed', 'BUDGET_EXCEEDED', 1.2]);
    await waitFor(async () => (await a.agent.tasks.get(t2.id)).state === 'canceled', 'the child canceled');
    await waitFor(() => noticesOf(a, t1.id).some((n) => n.code === 'BUDGET_EXCEEDED'), 'the requester told');

    const byTask = await lead.agent.call(governanceApi.usage, { by: 'task' });
    const row = byTask.rows.find((r) => r.key === t1.id);
    assert.deepEqual([row?.costUsd, row?.reports, row?.inputTokens], [1.2, 2, 200]);
    const byBinding = await lead.agent.call(governanceApi.usage, { by: 'binding' });
    assert.equal(byBinding.rows.find((r) => r.key === 'langgraph:thread-1')?.costUsd, 1.2);
  });
});
