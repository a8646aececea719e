/**
 * Parley agents as A2A servers through the gateway, called with the official `@a2a-js/sdk` client
 * (v1.0 and v0.3): the card and the directory, send, stream, get, list, cancel, resubscribe after a
 * dropped stream, push configs with an SSRF target refused, an unsupported version (-32009), and a
 * consent refusal — against a real Parley (nats-server, services, the gateway's HTTP server).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import { type Message, type StreamResponse, type Task, TaskState } from '@a2a-js/sdk';
import { gatewayApi } from '@parley/contracts';
import type { Agent } from '@parley/sdk';
import {
  a2aClient,
  a2aMessage,
  connectAdmin,
  connectTo,
  createAgent,
  startParley,
  type TestParley,
  waitFor,
} from '@parley/test/harness';
import { http } from './helpers.js';

const userMessage = a2aMessage;
const sendParams = (message: Message, returnImmediately = false) => ({
  tenant: '',
  message,
  configuration: returnImmediately
    ? {
        acceptedOutputModes: [],
        taskPushNotificationConfig: undefined,
        historyLength: undefined,
        returnImmediately: true,
      }
    : undefined,
  metadata: undefined,
});
const textOf = (m: Message | undefined) =>
  (m?.parts ?? []).map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join('');

/** The SDK client of a Parley agent through the gateway. */
const clientFor = (base: string, agentId: string, token: string, version: '1.0' | '0.3' = '1.0') =>
  a2aClient(`${base}/a2a/${agentId}/.well-known/agent-card.json`, { token, version });

describe('A2A inbound: Parley agents as A2A servers', () => {
  let parley: TestParley;
  let admin: Agent;
  let worker: Agent;
  let workerId: string;
  let callerKey: string;
  let base: string;
  /** What the agent got for each task, in order: `request` (a "slow" message), `cancel`. */
  const received = new Map<string, string[]>();
  const saw = (task: string, what: string) => received.set(task, [...(received.get(task) ?? []), what]);

  before(async () => {
    parley = await startParley();
    admin = await connectAdmin(parley);
    base = parley.httpUrl;
    const w = await createAgent(admin, {
      name: 'a2a-worker',
      description: 'answers over A2A',
      skills: [{ id: 'echo', name: 'Echo', description: 'says it back', tags: ['test'] }],
    });
    workerId = w.agent.id;
    worker = await connectTo(parley, w.creds);
    // An ordinary Parley handler: it knows nothing of A2A except the input-required convention.
    worker.on('message', async (d) => {
      const text = d.message.parts.map((p) => (p.type === 'text' ? p.text : '')).join('');
      const room = worker.rooms.room(d.room);
      if (d.message.kind === 'task.update') {
        saw(d.message.metadata?.['a2a.task'] ?? '', 'cancel');
        return;
      }
      if (text.startsWith('slow')) {
        saw(d.message.metadata?.['a2a.task'] ?? '', 'request');
        return; // answered never: cancelled by the caller
      }
      if (text.startsWith('stream')) {
        await room.send('thinking', { kind: 'status', replyTo: d.message.id });
        await room.send(`streamed: ${text}`, { replyTo: d.message.id });
        return;
      }
      if (text.startsWith('ask')) {
        await room.send('which environment?', {
          replyTo: d.message.id,
          metadata: { 'a2a.state': 'input-required' },
        });
        return;
      }
      await room.send(`echo: ${text}`, { replyTo: d.message.id });
    });
    await worker.listening;
    const c = await createAgent(admin, { name: 'a2a-caller' });
    callerKey = (await admin.call(gatewayApi.createKey, { agent: c.agent.id })).key;
  });
  after(async () => {
    await worker?.close();
    await admin?.close();
    await parley?.destroy();
  });

  it('serves the agent card (JSON-RPC + HTTP+JSON, v1.0 and v0.3, the gateway’s auth) and a directory', async () => {
    const card = await http(base, `/a2a/${workerId}/.well-known/agent-card.json`, { token: callerKey });
    assert.equal(card.status, 200, JSON.stringify(card.body));
    assert.equal(card.body.name, 'a2a-worker');
    const interfaces = card.body.supportedInterfaces as {
      url: string;
      protocolBinding: string;
      protocolVersion: string;
    }[];
    assert.deepEqual(
      interfaces.map((i) => `${i.protocolBinding} ${i.protocolVersion}`),
      ['JSONRPC 1.0', 'HTTP+JSON 1.0', 'JSONRPC 0.3', 'HTTP+JSON 0.3'],
    );
    assert.equal(interfaces[0]?.url, `${base}/a2a/${workerId}/jsonrpc`);
    assert.deepEqual(
      (card.body.skills as { id: string }[]).map((s) => s.id),
      ['echo'],
    );
    assert.ok(JSON.stringify(card.body.securitySchemes).includes('Bearer'));

    const anonymous = await http(base, `/a2a/${workerId}/.well-known/agent-card.json`);
    assert.equal(anonymous.status, 401);
    const unknown = await http(base, '/a2a/agt_01JZZZZZZZZZZZZZZZZZZZZZZZ/.well-known/agent-card.json', {
      token: callerKey,
    });
    assert.equal(unknown.status, 404);

    // Governance's delegation keys are public at the gateway.
    const jwks = await http(base, '/a2a/jwks.json');
    assert.equal(jwks.status, 200);
    assert.ok((jwks.body.keys as { kid: string }[]).length >= 1);

    const dir = await http(base, '/a2a', { token: callerKey });
    assert.equal(dir.status, 200);
    const ids = (dir.body.agents as { id: string; cardUrl: string }[]).map((a) => a.id);
    assert.ok(ids.includes(workerId), JSON.stringify(ids));
  });

  it('message/send (v1.0) answers with the Parley agent’s reply as a completed task with an artifact', async () => {
    const client = await clientFor(base, workerId, callerKey);
    const result = await client.sendMessage(sendParams(userMessage('hello')));
    assert.ok('status' in result, JSON.stringify(result));
    const task = result as Task;
    assert.equal(task.status?.state, TaskState.TASK_STATE_COMPLETED, JSON.stringify(task.status));
    assert.equal(textOf(task.status?.message), 'echo: hello');
    assert.equal(task.artifacts.length, 1);

    const got = await client.getTask({ tenant: '', id: task.id, historyLength: undefined });
    assert.equal(got.status?.state, TaskState.TASK_STATE_COMPLETED);
    // The same context continues in the same direct room.
    const again = await client.sendMessage(sendParams(userMessage('twice', { contextId: task.contextId })));
    const t2 = again as Task;
    assert.equal(t2.contextId, task.contextId);
    assert.equal(textOf(t2.status?.message), 'echo: twice');

    const listed = await client.listTasks({
      tenant: '',
      contextId: task.contextId,
      status: TaskState.TASK_STATE_UNSPECIFIED,
      pageToken: '',
      statusTimestampAfter: undefined,
    });
    assert.deepEqual(listed.tasks.map((t) => t.id).sort(), [task.id, t2.id].sort());
  });

  it('message/send through the v0.3 legacy mode', async () => {
    const client = await clientFor(base, workerId, callerKey, '0.3');
    const result = await client.sendMessage(sendParams(userMessage('old client')));
    const task = result as Task;
    assert.equal(task.status?.state, TaskState.TASK_STATE_COMPLETED, JSON.stringify(result));
    assert.equal(textOf(task.status?.message), 'echo: old client');
  });

  it('message/send over the HTTP+JSON binding', async () => {
    const client = await a2aClient(`${base}/a2a/${workerId}/.well-known/agent-card.json`, {
      token: callerKey,
      binding: 'HTTP+JSON',
    });
    const task = (await client.sendMessage(sendParams(userMessage('over rest')))) as Task;
    assert.equal(textOf(task.status?.message), 'echo: over rest');
    assert.equal((await client.getTask({ tenant: '', id: task.id, historyLength: undefined })).id, task.id);
  });

  it('message/stream: the task, a working update with the agent’s status, the artifact, completed', async () => {
    const client = await clientFor(base, workerId, callerKey);
    const events: StreamResponse[] = [];
    for await (const e of client.sendMessageStream(sendParams(userMessage('stream this')))) events.push(e);
    const kinds = events.map((e) => e.payload?.$case);
    assert.equal(kinds[0], 'task');
    assert.ok(kinds.includes('artifactUpdate'), kinds.join());
    const statuses = events.flatMap((e) =>
      e.payload?.$case === 'statusUpdate' ? [e.payload.value.status] : [],
    );
    assert.ok(statuses.some((s) => textOf(s?.message) === 'thinking'));
    assert.equal(statuses.at(-1)?.state, TaskState.TASK_STATE_COMPLETED);
    assert.equal(textOf(statuses.at(-1)?.message), 'streamed: stream this');
  });

  it('input-required, then the answer on the same task', async () => {
    const client = await clientFor(base, workerId, callerKey);
    const first = (await client.sendMessage(sendParams(userMessage('ask me')))) as Task;
    assert.equal(first.status?.state, TaskState.TASK_STATE_INPUT_REQUIRED);
    assert.equal(textOf(first.status?.message), 'which environment?');
    const second = (await client.sendMessage(
      sendParams(userMessage('staging', { taskId: first.id, contextId: first.contextId })),
    )) as Task;
    assert.equal(second.id, first.id);
    assert.equal(textOf(second.status?.message), 'echo: staging');
  });

  it('a dropped stream resumes with tasks/resubscribe; tasks/cancel tells the agent and ends the task', async () => {
    const client = await clientFor(base, workerId, callerKey);
    const sent = (await client.sendMessage(sendParams(userMessage('slow job'), true))) as Task;
    const id = sent.id;
    // A stream that the caller drops after the first event…
    for await (const e of client.resubscribeTask({ tenant: '', id })) {
      assert.equal(e.payload?.$case, 'task');
      break;
    }
    // …and a new one that sees everything from the task's current state to the end.
    const events: StreamResponse[] = [];
    const resumed = (async () => {
      for await (const e of client.resubscribeTask({ tenant: '', id })) events.push(e);
    })();
    await waitFor(() => events.length > 0, 'the resubscribed stream’s first event');
    await waitFor(() => received.get(id)?.includes('request') === true, 'the agent to receive the request');
    const canceled = await client.cancelTask({ tenant: '', id, metadata: undefined });
    assert.equal(canceled.status?.state, TaskState.TASK_STATE_CANCELED);
    await resumed;
    const last = events.at(-1);
    const seen = JSON.stringify(events.map((e) => e.payload?.$case));
    assert.equal(
      last?.payload?.$case === 'statusUpdate' && last.payload.value.status?.state,
      TaskState.TASK_STATE_CANCELED,
      seen,
    );
    await waitFor(() => received.get(id)?.includes('cancel') === true, 'the agent to receive the cancel');
    // Cancelling again is idempotent; a completed task is not cancelable: -32002.
    const again = await client.cancelTask({ tenant: '', id, metadata: undefined });
    assert.equal(again.status?.state, TaskState.TASK_STATE_CANCELED);
    const completed = (await client.sendMessage(sendParams(userMessage('done already')))) as Task;
    await assert.rejects(
      client.cancelTask({ tenant: '', id: completed.id, metadata: undefined }),
      (err: Error & { code?: number }) => /not cancelable/i.test(err.message),
    );
  });

  it('a cancel that races the request: the agent gets the request and then the cancel, or neither', async () => {
    // New callers and new contexts, the cancel sent 0, 8, … 88 ms after the task started: it lands
    // while the room is made, while the caller's inbox is set up, while the request is sent or after.
    // (Before the fix, a cancel during the inbox setup reached the agent before the request.)
    const tasks: { id: string; client: Awaited<ReturnType<typeof clientFor>>; contextId: string }[] = [];
    for (let i = 0; i < 12; i++) {
      const caller = await createAgent(admin, { name: `a2a-racer-${i}` });
      const key = (await admin.call(gatewayApi.createKey, { agent: caller.agent.id })).key;
      const client = await clientFor(base, workerId, key);
      const sent = (await client.sendMessage(
        sendParams(userMessage('slow and canceled at once'), true),
      )) as Task;
      await delay(i * 8);
      const canceled = await client.cancelTask({ tenant: '', id: sent.id, metadata: undefined });
      assert.equal(canceled.status?.state, TaskState.TASK_STATE_CANCELED);
      tasks.push({ id: sent.id, client, contextId: sent.contextId });
    }
    for (const { id, client, contextId } of tasks) {
      // Room order: once the agent answered a later message of the context, it had all earlier ones.
      const after = (await client.sendMessage(sendParams(userMessage('after', { contextId })))) as Task;
      assert.equal(after.status?.state, TaskState.TASK_STATE_COMPLETED);
      const got = JSON.stringify(received.get(id) ?? []);
      assert.ok(got === '[]' || got === '["request","cancel"]', `task ${id}: the agent got ${got}`);
      const stored = await client.getTask({ tenant: '', id, historyLength: undefined });
      assert.equal(stored.status?.state, TaskState.TASK_STATE_CANCELED);
    }
  });

  it('another principal cannot see the task (-32001); push configs refuse private targets', async () => {
    const client = await clientFor(base, workerId, callerKey);
    const done = (await client.sendMessage(sendParams(userMessage('mine')))) as Task;
    const other = await createAgent(admin, { name: 'a2a-other' });
    const otherKey = (await admin.call(gatewayApi.createKey, { agent: other.agent.id })).key;
    const otherClient = await clientFor(base, workerId, otherKey);
    await assert.rejects(
      otherClient.getTask({ tenant: '', id: done.id, historyLength: undefined }),
      /-32001|not found/i,
    );

    for (const url of [
      'http://127.0.0.1:9/hook',
      'http://169.254.169.254/latest',
      'http://[::1]/x',
      'file:///etc/passwd',
    ]) {
      await assert.rejects(
        client.createTaskPushNotificationConfig({
          tenant: '',
          id: 'p1',
          taskId: done.id,
          url,
          token: '',
          authentication: undefined,
        }),
        /private|loopback|http or https|-32602/i,
        url,
      );
    }
  });

  it('an unsupported A2A-Version is refused with -32009; no credentials is 401', async () => {
    const res = await fetch(`${base}/a2a/${workerId}/jsonrpc`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Bearer ${callerKey}`,
        'a2a-version': '9.9',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'x' } }),
    });
    const body = (await res.json()) as { error?: { code: number } };
    assert.equal(body.error?.code, -32009, JSON.stringify(body));
    const anon = await fetch(`${base}/a2a/${workerId}/jsonrpc`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    assert.equal(anon.status, 401);
  });
});
