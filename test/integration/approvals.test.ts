/**
 * Approval gates against a real backbone: an org policy holds `payments:*` for the agent owner's
 * yes. The held call waits; the owner is pinged, sees it in `parley approvals list`, approves it
 * through the CLI (the call runs once), denies another (APPROVAL_DENIED with the reason, the tool
 * never runs), lets a third time out (APPROVAL_TIMEOUT); every step is in the audit log.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { NatsConnection } from '@nats-io/transport-node';
import { type Approval, governanceApi, newId } from '@parley/contracts';
import { runCli } from '@parley/sdk/cli';
import { connectService, startParley, type TestParley, waitFor } from '@parley/test/harness';
import { auditRecords, codeOf, createWorld, type Member } from './fixtures/governance.js';

describe('approval gates', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  let world: Awaited<ReturnType<typeof createWorld>>;
  let olga: Member;
  let payer: Member;
  let olgaCreds: string;
  const pinged: Approval[] = [];

  const cli = async (creds: string, ...args: string[]) => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runCli([...args, '--as', creds, '--server', parley.natsUrl], {
      out: (l) => out.push(l),
      err: (l) => err.push(l),
    });
    return { code, out: out.join('\n'), err: err.join('\n') };
  };

  before(async () => {
    parley = await startParley();
    svc = await connectService(parley);
    world = await createWorld(parley);
    await world.admin.call(governanceApi.setOrgPolicy, {
      org: world.org.id,
      requireApproval: [{ scope: 'payments:*', approver: 'owner' }],
    });
    olga = await world.person('olga', ['payments:*', 'reports:*'], { listen: false });
    olga.agent.on('approval_requested', (d) => {
      if (d.approval) pinged.push(d.approval);
    });
    await olga.agent.listening;
    payer = await world.agentOf(olga, 'payer', ['payments:*', 'reports:*']);
    olgaCreds = join(parley.home.paths.credsDir, 'olga.creds');
    await writeFile(olgaCreds, olga.creds, { mode: 0o600 });
  });
  after(async () => {
    await world?.close();
    await svc?.close();
    await parley?.destroy();
  });

  it('holds the call until the owner approves it through the CLI; it then runs once', async () => {
    let runs = 0;
    const id = newId('toolCall');
    const call = payer.agent.tools.call('payments.charge', { amount: 10 }, () => ++runs, {
      action: 'payments:charge',
      id,
      approvalReason: 'invoice 42 is due today',
    });
    await waitFor(() => pinged.some((a) => a.id === id), 'the owner to be pinged');
    assert.equal(runs, 0, 'nothing runs before the yes');
    const listed = await cli(olgaCreds, 'approvals', 'list');
    assert.equal(listed.code, 0, listed.err);
    assert.match(
      listed.out,
      new RegExp(`${id}\\s+pending\\s+${payer.id} → payments.charge \\(payments:charge\\)`),
    );
    assert.match(listed.out, /why: "invoice 42 is due today"/);
    const approved = await cli(olgaCreds, 'approvals', 'approve', id, '--reason', 'checked the invoice');
    assert.equal(approved.code, 0, approved.err);
    assert.equal(await call, 1);
    assert.equal(runs, 1);
    // Other scopes are not held.
    assert.equal(
      await payer.agent.tools.call('reports.read', {}, () => 'r', { action: 'reports:read' }),
      'r',
    );
    assert.equal(
      (await cli(olgaCreds, 'approvals', 'approve', id, '--reason', 'again')).err.split(':')[0],
      'CONFLICT',
      'decided once',
    );
    await waitFor(
      async () => (await auditRecords(svc, 'approval')).filter((r) => r.target === id).length === 2,
      'the approval audited',
    );
    const audit = (await auditRecords(svc, 'approval')).filter((r) => r.target === id);
    assert.deepEqual(
      audit.map((r) => [r.action, r.actor, r.decision?.reason]),
      [
        ['requested', payer.id, undefined],
        ['approved', olga.id, 'checked the invoice'],
      ],
    );
  });

  it('a denial refuses the call with APPROVAL_DENIED and the reason; the tool never runs', async () => {
    let runs = 0;
    const id = newId('toolCall');
    // Settled into a value at once: it is refused while the test is still busy with the stranger.
    const call = payer.agent.tools
      .call('payments.charge', { amount: 9000 }, () => ++runs, { action: 'payments:charge', id })
      .then(
        () => undefined,
        (err: Error & { code?: string }) => err,
      );
    await waitFor(() => pinged.some((a) => a.id === id), 'the owner to be pinged');
    const stranger = await world.person('stranger', [], { listen: false });
    assert.equal(
      await codeOf(stranger.agent.approvals.deny(id, 'no')),
      'PERMISSION_DENIED',
      'not an approver',
    );
    await olga.agent.approvals.deny(id, 'far too much');
    const err = await call;
    assert.equal(err?.code, 'APPROVAL_DENIED');
    assert.match(err?.message ?? '', /far too much/);
    assert.equal(runs, 0);
  });

  it('unanswered past its timeout the call fails with APPROVAL_TIMEOUT, and a late yes is refused', async () => {
    let runs = 0;
    const id = newId('toolCall');
    const call = payer.agent.tools.call('payments.charge', { amount: 1 }, () => ++runs, {
      action: 'payments:charge',
      id,
      approvalTimeoutMs: 1_000,
    });
    assert.equal(await codeOf(call), 'APPROVAL_TIMEOUT');
    assert.equal(runs, 0);
    assert.equal(await codeOf(olga.agent.approvals.approve(id, 'sorry, late')), 'CONFLICT');
    assert.equal(
      (await olga.agent.approvals.list(['timed_out'])).some((a) => a.id === id),
      true,
    );
    await waitFor(
      async () =>
        (await auditRecords(svc, 'approval')).some((r) => r.target === id && r.action === 'timed_out'),
      'the timeout audited',
    );
  });
});
