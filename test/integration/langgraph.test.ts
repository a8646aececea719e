/**
 * The LangGraph adapter against a real backbone: a task starts the graph's thread, its interrupt
 * becomes input_required, the process is killed -9 while waiting, the requester answers, a new
 * process of the same agent resumes the thread from the checkpoint stored in Parley (the node that
 * ran before the kill does not run again) and completes the task with the graph's final state;
 * `tasks.get` lists the runtime's thread and run ids.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startParley, type TestParley, waitFor } from '@parley/test/harness';

function startAgent(
  env: Record<string, string>,
): Promise<{ child: ChildProcess; output(): string; kill9(): Promise<void> }> {
  const child = spawn(process.execPath, ['test/integration/fixtures/langgraph-agent.ts'], {
    cwd: resolve(import.meta.dirname, '../..'),
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return new Promise((resolveStart, reject) => {
    let out = '';
    const onExit = (code: number | null) =>
      reject(new Error(`agent exited (${code}) before listening:\n${out}`));
    child.stdout?.on('data', (d) => {
      out += d;
      if (out.includes('listening')) {
        child.off('exit', onExit);
        resolveStart({
          child,
          output: () => out,
          async kill9() {
            child.kill('SIGKILL');
            await exited;
          },
        });
      }
    });
    child.stderr?.on('data', (d) => {
      out += d;
    });
    child.once('exit', onExit);
  });
}

describe('LangGraph adapter', () => {
  let parley: TestParley;
  let dir: string;
  before(async () => {
    parley = await startParley();
    dir = await mkdtemp(join(tmpdir(), 'parley-langgraph-'));
  });
  after(async () => {
    await parley?.destroy();
    await rm(dir, { recursive: true, force: true });
  });

  it('resumes a thread after its process is killed: the answer goes on from the checkpoint', async () => {
    const requester = await parley.participant();
    const graphAgent = await parley.participant();
    const alice = await parley.connect(requester.creds);
    const room = (await alice.rooms.create('langgraph', { members: [graphAgent.id] })).id;
    const file = join(dir, 'nodes.log');
    const env = { NATS_URL: parley.natsUrl, CREDS: graphAgent.creds, RECORD_FILE: file };
    const first = await startAgent(env);
    const task = await alice.tasks.create(room, {
      assignee: graphAgent.id,
      goal: 'ship order 7',
      inputs: { order: 'order-7' },
    });
    let seen = '';
    await waitFor(
      async () => {
        seen = (await alice.tasks.get(task.id)).state;
        return seen === 'input_required';
      },
      () => `the interrupt (task ${seen}; agent: ${first.output()})`,
    );
    const asked = await alice.tasks.get(task.id);
    assert.equal(asked.reason, 'ship it?');
    const binding = asked.bindings.find((b) => b.runtime === 'langgraph');
    assert.equal(binding?.ids.thread_id, task.id);
    assert.match(binding?.ids.run_id ?? '', /\w+/);
    await first.kill9();
    const lines = async () =>
      (await readFile(file, 'utf8'))
        .trim()
        .split('\n')
        .map((l) => l.split(' ') as [string, string]);
    assert.deepEqual(
      (await lines()).map(([, node]) => node),
      ['plan'],
    );

    // Answered while no process of the graph runs: it waits in the agent's durable inbox.
    await alice.rooms.room(room).send('yes, ship it', { task: task.id });
    const second = await startAgent(env);
    try {
      await waitFor(
        async () => (await alice.tasks.get(task.id)).state === 'completed',
        'the thread to finish',
      );
      const done = await alice.tasks.get(task.id);
      assert.deepEqual(done.result, {
        order: 'order-7',
        steps: ['planned order-7', 'confirmed', 'shipped order-7'],
        approvedBy: 'yes, ship it',
      });
      const ran = await lines();
      assert.deepEqual(
        ran.map(([, node]) => node),
        ['plan', 'confirm', 'ship'],
        'plan ran once, before the kill',
      );
      assert.equal(ran[0]?.[0], String(first.child.pid));
      assert.deepEqual(
        ran.slice(1).map(([pid]) => pid),
        [String(second.child.pid), String(second.child.pid)],
      );
      const runs = done.bindings.filter((b) => b.runtime === 'langgraph');
      assert.equal(runs.length, 1, 'one binding per thread, its run id updated');
      assert.notEqual(runs[0]?.ids.run_id, binding?.ids.run_id);
    } finally {
      await second.kill9();
    }
  });
});
