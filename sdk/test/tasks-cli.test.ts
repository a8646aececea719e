import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { governanceApi } from '@parley/contracts';
import { runCli } from '@parley/sdk/cli';
import { connectAdmin, createAgent, startParley, type TestParley } from '@parley/test/harness';

function capture() {
  const lines = { out: [] as string[], err: [] as string[] };
  return { io: { out: (l: string) => lines.out.push(l), err: (l: string) => lines.err.push(l) }, lines };
}

describe('parley task', () => {
  let parley: TestParley;
  const creds: Record<string, string> = {};
  const ids: Record<string, string> = {};

  before(async () => {
    parley = await startParley();
    const admin = await connectAdmin(parley);
    // The agents act on their owner's authority: the admin holds the tool scope.
    await admin.call(governanceApi.setGrants, { participant: admin.id, scopes: ['tool:*'] });
    for (const name of ['planner', 'doer']) {
      const a = await createAgent(admin, { name, scopes: ['tool:*'] });
      ids[name] = a.agent.id;
      creds[name] = join(parley.home.paths.credsDir, `${name}.creds`);
      await writeFile(creds[name] as string, a.creds, { mode: 0o600 });
    }
    await admin.close();
  });
  after(async () => {
    await parley?.destroy();
  });

  const cli = async (who: string, ...args: string[]) => {
    const c = capture();
    const code = await runCli([...args, '--as', creds[who] as string, '--server', parley.natsUrl], c.io);
    return { code, out: c.lines.out.join('\n'), err: c.lines.err.join('\n') };
  };

  it('creates, starts, shows side effects and compensations, fails, and refuses with a code', async () => {
    const help = await cli('planner', 'task', '--help');
    for (const sub of ['create', 'list', 'show', 'start', 'complete', 'fail', 'cancel', 'reassign'])
      assert.match(help.out, new RegExp(`\\b${sub}\\b`));
    const planner = await parley.connect(creds.planner as string);
    const doer = await parley.connect(creds.doer as string);
    const room = (await planner.rooms.create('cli tasks', { members: [ids.doer as string] })).id;
    const created = await cli(
      'planner',
      '--json',
      'task',
      'create',
      room,
      ids.doer as string,
      'ship it',
      '--deadline',
      '1h',
    );
    assert.equal(created.code, 0, created.err);
    const task = JSON.parse(created.out) as { id: string; state: string; deadline: string };
    assert.equal(task.state, 'submitted');
    assert.ok(Date.parse(task.deadline) > Date.now() + 3_500_000);
    assert.equal((await cli('doer', 'task', 'start', task.id)).code, 0);
    await doer.tools.call('deploy.release', { version: '1.2' }, () => ({ released: '1.2' }), {
      task: task.id,
      idempotencyKey: 'release-1.2',
      compensate: () => undefined,
    });
    await doer.tasks.fail(task.id, 'smoke test failed');
    const shown = await cli('planner', 'task', 'show', task.id);
    assert.equal(shown.code, 0, shown.err);
    assert.match(shown.out, /state\s+failed — smoke test failed/);
    assert.match(shown.out, /release-1\.2 {2}deploy\.release {2}done {2}compensation done/);
    const listed = await cli('planner', 'task', 'list', '--state', 'failed');
    assert.match(listed.out, new RegExp(task.id));
    const refused = await cli('doer', 'task', 'start', task.id);
    assert.equal(refused.code, 1);
    assert.match(refused.err, /^ILLEGAL_TRANSITION: /);
    const badCode = await cli('doer', 'task', 'fail', task.id, 'x', '--code', 'NOPE');
    assert.match(badCode.err, /^INVALID_ARGUMENT: --code/);
  });
});
