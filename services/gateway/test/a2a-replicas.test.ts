/**
 * A2A across gateway replicas, with real gateway processes next to the in-process one:
 *
 * - Inbound: a task runs on one replica; its push-notification configs are created, listed, read
 *   and deleted through the other (NATS KV), the replica running it delivers the notifications, and
 *   `tasks/resubscribe` through the other replica sees its live events (over NATS).
 * - Outbound: the gateway process streaming a remote task is killed (SIGKILL) mid-stream; the
 *   restarted one resubscribes to the remote task and carries the rest into the room, each event
 *   exactly once.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type StreamResponse, TaskState } from '@a2a-js/sdk';
import { a2aApi, gatewayApi, type HistoryEntry } from '@parley/contracts';
import type { Agent } from '@parley/sdk';
import {
  a2aClient,
  a2aMessage,
  connectAdmin,
  connectTo,
  createAgent,
  type ServiceProcess,
  startParley,
  startServiceProcess,
  stopProcesses,
  type TestParley,
  waitFor,
} from '@parley/test/harness';
import { vendorAgent } from './a2a-vendor.js';

const clientAt = (base: string, agentId: string, token: string) =>
  a2aClient(`${base}/a2a/${agentId}/.well-known/agent-card.json`, { token });

/** Collects a stream's events in the background. */
function collect(stream: AsyncGenerator<StreamResponse>) {
  const events: StreamResponse['payload'][] = [];
  const done = (async () => {
    for await (const e of stream) events.push(e.payload);
  })();
  return { events, done };
}

const stateOf = (e: StreamResponse['payload']) =>
  e?.$case === 'statusUpdate' || e?.$case === 'task' ? e.value.status?.state : undefined;

/** A push-notification receiver: what arrived, and when. */
async function pushReceiver() {
  const got: { body: { statusUpdate?: { status?: { state?: string } } }; token?: string }[] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => {
      body += c;
    });
    req.on('end', () => {
      got.push({
        body: JSON.parse(body),
        ...(req.headers['x-a2a-notification-token']
          ? { token: String(req.headers['x-a2a-notification-token']) }
          : {}),
      });
      res.end('ok');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/push`,
    got,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

describe('A2A across gateway replicas (gateway processes)', () => {
  let parley: TestParley;
  let admin: Agent;
  let desk: Agent;
  let deskId: string;
  let key: string;
  const release = new Map<string, () => void>();
  const cancels: string[] = [];
  let env: Record<string, string>;
  const replicas: ServiceProcess[] = [];
  let replica: string;

  const startReplica = async () => {
    const p = await startServiceProcess('gateway', env);
    replicas.push(p);
    return p;
  };

  before(async () => {
    // The in-process gateway serves A2A but runs no outbound proxies: those run in the processes.
    parley = await startParley({
      gateway: { PARLEY_WEBHOOK_ALLOW_PRIVATE: '127.0.0.1', PARLEY_A2A_OUTBOUND: 'false' },
    });
    admin = await connectAdmin(parley);
    const credsFile = join(parley.home.paths.credsDir, 'gateway-replica.creds');
    await writeFile(credsFile, await parley.serviceCreds('gateway'), { mode: 0o600 });
    env = {
      NATS_URL: parley.natsUrl,
      NATS_CREDS: credsFile,
      PARLEY_WEBHOOK_ALLOW_PRIVATE: '127.0.0.1',
    };
    const d = await createAgent(admin, { name: 'desk' });
    deskId = d.agent.id;
    desk = await connectTo(parley, d.creds);
    // Holds its answer to "hold" until the test releases it.
    desk.on('message', async (del) => {
      if (del.message.kind === 'task.update') cancels.push(del.message.metadata?.['a2a.task'] ?? '');
      if (del.message.kind !== 'message') return;
      const room = desk.rooms.room(del.room);
      const text = del.message.parts.map((p) => (p.type === 'text' ? p.text : '')).join('');
      if (text === 'question') {
        await room.send('which one?', {
          replyTo: del.message.id,
          metadata: { 'a2a.state': 'input-required' },
        });
        return;
      }
      await room.send('on it', { kind: 'status', replyTo: del.message.id });
      // Answered later, without holding up the room's next deliveries (a cancel among them).
      void new Promise<void>((r) => release.set(del.message.metadata?.['a2a.task'] ?? '', r)).then(() =>
        room.send('done', { replyTo: del.message.id }),
      );
    });
    await desk.listening;
    const caller = await createAgent(admin, { name: 'a2a-replica-caller' });
    key = (await admin.call(gatewayApi.createKey, { agent: caller.agent.id })).key;
    replica = (await startReplica()).healthUrl.replace(/\/healthz$/, '');
  });
  after(async () => {
    // Each replica must stop cleanly on SIGTERM, as a pod does on a rollout (before nats-server goes).
    const failed = await stopProcesses(replicas).then(
      () => undefined,
      (err: unknown) => err,
    );
    await desk?.close();
    await admin?.close();
    await parley?.destroy();
    if (failed) throw failed;
  });

  it('push configs and resubscribe work through a replica that does not run the task', async () => {
    const receiver = await pushReceiver();
    try {
      const runner = await clientAt(replica, deskId, key);
      const other = await clientAt(parley.httpUrl, deskId, key);
      // The task runs on the replica process (its executor waits for the desk's answer).
      const first = collect(
        runner.sendMessageStream({
          tenant: '',
          message: a2aMessage('hold'),
          configuration: undefined,
          metadata: undefined,
        }),
      );
      await waitFor(
        () => first.events.some((e) => e?.$case === 'statusUpdate' && e.value.status?.message),
        'on it',
      );
      const taskEvent = first.events.find((e) => e?.$case === 'task');
      assert.ok(taskEvent?.$case === 'task');
      const taskId = taskEvent.value.id;

      // Set through the other replica, seen and read through the runner.
      const config = await other.createTaskPushNotificationConfig({
        tenant: '',
        taskId,
        id: '',
        url: receiver.url,
        token: 'push-secret',
        authentication: undefined,
      });
      assert.ok(config.id);
      const listed = await runner.listTaskPushNotificationConfig({
        tenant: '',
        taskId,
        pageSize: 10,
        pageToken: '',
      });
      assert.deepEqual(
        listed.configs.map((c) => [c.id, c.url]),
        [[config.id, receiver.url]],
      );
      const read = await runner.getTaskPushNotificationConfig({ tenant: '', taskId, id: config.id });
      assert.equal(read.url, receiver.url);

      // Resubscribed through the replica that does not run it: the snapshot, then live events.
      const resub = collect(other.resubscribeTask({ tenant: '', id: taskId }));
      await waitFor(() => resub.events.length > 0, 'the snapshot of the resubscribed task');
      release.get(taskId)?.();
      await resub.done;
      await first.done;
      const artifact = resub.events.find((e) => e?.$case === 'artifactUpdate');
      assert.ok(artifact?.$case === 'artifactUpdate', JSON.stringify(resub.events.map((e) => e?.$case)));
      assert.equal(artifact.value.artifact?.parts[0]?.content?.value, 'done');
      assert.equal(stateOf(resub.events.at(-1)), TaskState.TASK_STATE_COMPLETED);

      // The replica running the task delivered the notifications (the config came from the other one).
      await waitFor(
        () => receiver.got.some((g) => g.body.statusUpdate?.status?.state === 'TASK_STATE_COMPLETED'),
        'the completed push notification',
      );
      assert.ok(receiver.got.every((g) => g.token === 'push-secret'));

      // Deleted through the runner, gone for the other replica.
      await runner.deleteTaskPushNotificationConfig({ tenant: '', taskId, id: config.id });
      const after = await other.listTaskPushNotificationConfig({
        tenant: '',
        taskId,
        pageSize: 10,
        pageToken: '',
      });
      assert.deepEqual(after.configs, []);
    } finally {
      await receiver.close();
    }
  });

  it('tasks/cancel through a replica that does not run the task reaches the one that does', async () => {
    const runner = await clientAt(replica, deskId, key);
    const other = await clientAt(parley.httpUrl, deskId, key);
    const running = collect(
      runner.sendMessageStream({
        tenant: '',
        message: a2aMessage('hold'),
        configuration: undefined,
        metadata: undefined,
      }),
    );
    await waitFor(
      () => running.events.some((e) => e?.$case === 'statusUpdate' && e.value.status?.message),
      'on it',
    );
    const first = running.events.find((e) => e?.$case === 'task');
    assert.ok(first?.$case === 'task');
    const canceled = await other.cancelTask({ tenant: '', id: first.value.id, metadata: undefined });
    assert.equal(canceled.status?.state, TaskState.TASK_STATE_CANCELED);
    // The runner told the agent, and its stream ended canceled.
    await waitFor(() => cancels.includes(first.value.id), 'the agent to get the cancel');
    await running.done;
    assert.equal(stateOf(running.events.at(-1)), TaskState.TASK_STATE_CANCELED);
    release.get(first.value.id)?.();

    // A task nobody runs (it waits for input) is canceled as stored.
    const asked = (await runner.sendMessage({
      tenant: '',
      message: a2aMessage('question'),
      configuration: undefined,
      metadata: undefined,
    })) as { id: string; status?: { state?: TaskState } };
    assert.equal(asked.status?.state, TaskState.TASK_STATE_INPUT_REQUIRED);
    const dropped = await other.cancelTask({ tenant: '', id: asked.id, metadata: undefined });
    assert.equal(dropped.status?.state, TaskState.TASK_STATE_CANCELED);
    assert.equal(
      (await runner.getTask({ tenant: '', id: asked.id, historyLength: undefined })).status?.state,
      TaskState.TASK_STATE_CANCELED,
    );
  });

  it('a gateway killed mid-stream: the restarted one resubscribes and the rest reaches the room exactly once', async () => {
    const vendor = await vendorAgent('Long Vendor');
    try {
      vendor.trust(`${parley.httpUrl}/a2a/jwks.json`);
      const imported = await admin.call(a2aApi.importA2a, {
        cardUrl: vendor.cardUrl,
        owner: parley.home.state.admin.id,
      });
      const room = admin.rooms.room((await admin.rooms.create('long job', { members: [imported.agent] })).id);
      const fromAgent = async () =>
        (await room.history({ order: 'oldest', limit: 100 })).entries.filter(
          (e: HistoryEntry) => e.message.sender.id === imported.agent,
        );
      const text = (e: HistoryEntry) =>
        e.message.parts.map((p) => (p.type === 'text' ? p.text : '')).join('');
      const request = await room.send('long job please', { mentions: [imported.agent] });
      await waitFor(
        async () => (await fromAgent()).some((e) => text(e) === 'step 1 of 3'),
        'step 1 in the room',
      );
      const taskId = vendor.longTasks.at(-1) as string;

      const killedAt = performance.now();
      await replicas.at(-1)?.kill9();
      await startReplica();
      const restartedAt = performance.now();
      await waitFor(
        () => vendor.resubscribed.includes(taskId),
        'the restarted gateway to resubscribe',
        30_000,
      );
      const resumedAt = performance.now();
      vendor.step();
      await waitFor(
        async () => (await fromAgent()).some((e) => text(e) === 'step 2 of 3'),
        'step 2 in the room',
      );
      vendor.step();
      await waitFor(
        async () => (await fromAgent()).some((e) => text(e) === 'long result'),
        'the result in the room',
      );
      const all = (await fromAgent()).filter((e) => e.message.replyTo === request.id).map(text);
      assert.deepEqual(
        all.filter((t) => t !== ''),
        ['step 1 of 3', 'step 2 of 3', 'long result'],
        'each event of the remote task once, in order',
      );
      // Every call, the resubscribe too, carried a delegation token the vendor verified.
      assert.equal(vendor.refusedTokens.length, 0);
      assert.ok(vendor.delegations.some((c) => c.messageId === request.id && c.taskId === taskId));
      // For the note: kill → restarted process healthy → resubscribed.
      process.stdout.write(
        `# a2a resume: restart ${(restartedAt - killedAt).toFixed(0)} ms, resubscribed ${(resumedAt - killedAt).toFixed(0)} ms after the kill\n`,
      );
    } finally {
      await vendor.close();
    }
  });
});
