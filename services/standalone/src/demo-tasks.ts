/**
 * The tasks part of the demo: the local admin gives the planner a task, the planner delegates part
 * of it to the reviewer (a child task), the reviewer's canary deploy is held by org policy until
 * the admin approves it (`parley approvals approve`, printed), the canary fails its health check,
 * the reviewer fails its task: the side effect is compensated (rolled back) and the failure
 * travels up — the planner and the admin are told why — and `parley task show` prints the record.
 * Kept apart from demo.ts, which only calls {@link runTaskDemo}.
 */
import { approvalsApi, governanceApi, registryApi, type TaskNotice } from '@parley/contracts';
import { type Agent, connect } from '@parley/sdk';
import { runCli } from '@parley/sdk/cli';
import type { Home } from './home.js';

const SCOPE = 'deploy:canary';

/** Runs the task step; resolves when the failure reached the admin. */
export async function runTaskDemo(o: {
  natsUrl: string;
  home: Home;
  ids: { planner: string; reviewer: string };
  planner: Agent;
  reviewer: Agent;
  out: (line: string) => void;
}): Promise<void> {
  const me = o.home.state.admin.id;
  const org = o.home.state.org.id;
  const admin = await connect({ servers: o.natsUrl, creds: o.home.paths.adminCreds, presence: false });
  const cli = (args: string[]) =>
    runCli([...args, '--server', o.natsUrl, '--as', o.home.paths.adminCreds], {
      out: (line) => {
        for (const l of line.split('\n')) o.out(`      ${l}`);
      },
      err: (line) => o.out(`      ${line}`),
    });
  try {
    // Idempotent set-up: the admin holds the scope, the reviewer's card lists it, and the org's
    // policy holds it for the owner's approval (added to whatever the policy says already).
    const may = await admin.call(governanceApi.authorize, { action: SCOPE });
    if (!may.allow && may.code !== 'APPROVAL_REQUIRED') {
      await admin.call(governanceApi.setGrants, { participant: me, scopes: ['repo:read', SCOPE] });
    }
    const { agent } = await admin.call(registryApi.getAgent, { agent: o.ids.reviewer });
    if (!agent.card.scopes.includes(SCOPE)) {
      await admin.call(registryApi.updateAgent, {
        agent: o.ids.reviewer,
        revision: agent.revision,
        card: { ...agent.card, scopes: [...agent.card.scopes, SCOPE] },
      });
    }
    const { policy } = await admin.call(approvalsApi.getOrgPolicy, { org });
    if (!policy?.requireApproval.some((r) => r.scope === SCOPE)) {
      await admin.call(governanceApi.setOrgPolicy, {
        org,
        grants: policy?.grants ?? [],
        deny: policy?.deny ?? [],
        requireApproval: [...(policy?.requireApproval ?? []), { scope: SCOPE, approver: 'owner' }],
      });
    }

    // The planner (the requester of the reviewer's task) hears of the failure as a delivery; the
    // admin's own inbox is left alone (it is the person's: `parley tail` and the console read it).
    const told = new Promise<TaskNotice>((resolve) => {
      o.planner.on('task_failed', (d) => {
        if (d.taskNotice?.role === 'requester') resolve(d.taskNotice);
      });
    });
    const pinged = async (): Promise<string> => {
      for (let i = 0; i < 300; i++) {
        const held = (await admin.approvals.list()).find((a) => a.tool === 'deploy.canary');
        if (held) return held.id;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error('the approval request did not arrive');
    };

    // A room of its own, so the review conversation above stays as it was.
    const room = (await o.planner.rooms.create('Task: billing-v2 canary', { members: [o.ids.reviewer, me] }))
      .id;
    const t1 = await admin.tasks.create(room, {
      assignee: o.ids.planner,
      goal: 'Roll out billing-v2 with a 5% canary',
      deadline: 10 * 60_000,
    });
    o.out(`demo  admin → planner: task ${t1.id} “Roll out billing-v2 with a 5% canary” (deadline in 10 min)`);
    await o.planner.tasks.start(t1.id);
    const t2 = await o.planner.tasks.create(room, {
      assignee: o.ids.reviewer,
      goal: 'Deploy the 5% canary and watch its error rate',
      parent: t1.id,
    });
    o.out(`demo  planner → reviewer: task ${t2.id} (part of ${t1.id})`);
    await o.reviewer.tasks.start(t2.id);

    const deploy = o.reviewer.tools.call(
      'deploy.canary',
      { service: 'billing-v2', percent: 5 },
      () => ({ release: 'billing-v2-canary-1' }),
      {
        task: t2.id,
        idempotencyKey: 'canary-5',
        action: SCOPE,
        approvalReason: 'canary of billing-v2 at 5% as the review asked',
        compensate: (r) =>
          o.out(`demo  reviewer rolls back ${(r as { release: string }).release} (compensation)`),
      },
    );
    const held = await pinged();
    o.out(
      `demo  reviewer's deploy.canary is held for the owner's approval (${held}); parley approvals list:`,
    );
    await cli(['approvals', 'list']);
    o.out(`demo  parley approvals approve ${held} --reason "canary at 5% is fine":`);
    await cli(['approvals', 'approve', held, '--reason', 'canary at 5% is fine']);
    await deploy;
    o.out('demo  reviewer deploys the canary (side effect recorded under the task)');
    o.out(`demo  reviewer fails ${t2.id}: canary error rate 4% is over the 1% threshold`);
    await o.reviewer.tasks.fail(t2.id, 'canary error rate 4% is over the 1% threshold');
    const n = await told;
    o.out(`demo  planner is told: task ${n.task} ${n.state} (“${n.reason}”), path ${n.path.join(' → ')}`);
    o.out(`demo  parley task show ${t2.id}:`);
    await cli(['task', 'show', t2.id]);
    await o.planner.tasks.fail(t1.id, `the canary failed: ${n.reason}`);
    o.out(`demo  planner fails ${t1.id}: the admin is told in its Parley notices (npx parley task list)`);
  } finally {
    await admin.close();
  }
}
