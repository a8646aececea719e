/**
 * External A2A agents in rooms: an `@a2a-js/sdk` server (real HTTP, express) imported with
 * `parley agent import-a2a`, invited into a room with a human and a Parley agent; it answers (with
 * the room history as context), streams, asks for input (the humans are mentioned), is cancelled,
 * and one trace spans both sides (the Parley message's trace id arrives as `traceparent`). A
 * signed card with a bad signature and a card on a private address are refused.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { AgentCard, generateAgentCardSignature, type Message, Role, TaskState } from '@a2a-js/sdk';
import { AgentEvent, type AgentExecutor, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { a2aApi, type HistoryEntry, registryApi } from '@parley/contracts';
import { loadTelemetryConfig } from '@parley/kit';
import type { Agent } from '@parley/sdk';
import { runCli } from '@parley/sdk/cli';
import {
  codeOf,
  connectTo,
  createAgent,
  type OtlpReceiver,
  startOtlpReceiver,
  startParley,
  type TestParley,
  waitFor,
} from '@parley/test/harness';
import express from 'express';
import { exportJWK, generateKeyPair } from 'jose';

const agentMsg = (text: string, contextId: string, taskId: string): Message => ({
  messageId: `r-${Math.random().toString(36).slice(2)}`,
  contextId,
  taskId,
  role: Role.ROLE_AGENT,
  parts: [
    { content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: 'text/plain' },
  ],
  metadata: undefined,
  extensions: [],
  referenceTaskIds: [],
});

/** A vendor's A2A agent: real HTTP, the official SDK server. */
async function vendorAgent(name = 'Vendor Helper') {
  const seen: { text: string; history: number; traceparent?: string; messageId: string }[] = [];
  const canceled: string[] = [];
  const waiting = new Map<string, () => void>();
  let lastTraceparent: string | undefined;
  const executor: AgentExecutor = {
    async execute(ctx, bus) {
      const text = ctx.userMessage.parts
        .map((p) => (p.content?.$case === 'text' ? p.content.value : ''))
        .join('');
      const data = ctx.userMessage.parts.find((p) => p.content?.$case === 'data')?.content;
      const history =
        data?.$case === 'data'
          ? ((data.value as { parleyRoomHistory?: unknown[] }).parleyRoomHistory?.length ?? 0)
          : 0;
      seen.push({
        text,
        history,
        messageId: ctx.userMessage.messageId,
        ...(lastTraceparent ? { traceparent: lastTraceparent } : {}),
      });
      const { taskId, contextId } = ctx;
      const status = (state: TaskState, m?: string) => ({
        state,
        message: m ? agentMsg(m, contextId, taskId) : undefined,
        timestamp: new Date().toISOString(),
      });
      bus.publish(
        AgentEvent.task(
          ctx.task ?? {
            id: taskId,
            contextId,
            status: status(TaskState.TASK_STATE_SUBMITTED),
            artifacts: [],
            history: [],
            metadata: undefined,
          },
        ),
      );
      const update = (state: TaskState, m?: string) =>
        bus.publish(
          AgentEvent.statusUpdate({ taskId, contextId, status: status(state, m), metadata: undefined }),
        );
      if (ctx.task?.status?.state === TaskState.TASK_STATE_INPUT_REQUIRED) {
        update(TaskState.TASK_STATE_COMPLETED, `region noted: ${text}`);
      } else if (text.includes('ask')) {
        update(TaskState.TASK_STATE_INPUT_REQUIRED, 'which region?');
      } else if (text.includes('slow')) {
        update(TaskState.TASK_STATE_WORKING, 'started the long job');
        await new Promise<void>((r) => waiting.set(taskId, r));
      } else {
        if (text.includes('stream')) update(TaskState.TASK_STATE_WORKING, 'working on it');
        bus.publish(
          AgentEvent.artifactUpdate({
            taskId,
            contextId,
            artifact: {
              artifactId: 'a1',
              name: 'answer',
              description: '',
              parts: agentMsg(
                `remote: ${text.replace(/@\S+\s*/g, '')} (saw ${history} earlier)`,
                contextId,
                taskId,
              ).parts,
              metadata: undefined,
              extensions: [],
            },
            append: false,
            lastChunk: true,
            metadata: undefined,
          }),
        );
        update(TaskState.TASK_STATE_COMPLETED);
      }
      bus.finished();
    },
    async cancelTask(taskId, bus) {
      canceled.push(taskId);
      bus.publish(
        AgentEvent.statusUpdate({
          taskId,
          contextId: '',
          status: {
            state: TaskState.TASK_STATE_CANCELED,
            message: undefined,
            timestamp: new Date().toISOString(),
          },
          metadata: undefined,
        }),
      );
      waiting.get(taskId)?.();
    },
  };
  const app = express();
  app.use((req, _res, next) => {
    lastTraceparent = req.headers.traceparent as string | undefined;
    next();
  });
  const server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const card = {
    name,
    description: 'a vendor’s A2A agent',
    supportedInterfaces: [
      { url: `${base}/jsonrpc`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' },
    ],
    provider: { organization: 'Vendor', url: base },
    version: '2.0.0',
    capabilities: { streaming: true, pushNotifications: false, extensions: [] },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [
      {
        id: 'Answer',
        name: 'Answer',
        description: 'answers',
        tags: ['vendor'],
        examples: [],
        inputModes: [],
        outputModes: [],
        securityRequirements: [],
      },
    ],
    signatures: [],
  } as unknown as AgentCard;
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);
  app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler }));
  app.use('/jsonrpc', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  // A card signed with a key published at its jku, and one claiming a signature that cannot verify.
  const { privateKey, publicKey } = await generateKeyPair('ES256', { extractable: true });
  const signedCard = await generateAgentCardSignature(privateKey, {
    alg: 'ES256',
    kid: 'vendor-1',
    typ: 'JOSE',
    jku: `${base}/jwks.json`,
  })({ ...card, name: 'Signed Vendor' });
  app.get('/jwks.json', async (_req, res) => {
    res.json({ keys: [{ ...(await exportJWK(publicKey)), kid: 'vendor-1', alg: 'ES256' }] });
  });
  app.get('/good/.well-known/agent-card.json', (_req, res) => {
    res.json(AgentCard.toJSON(signedCard));
  });
  app.get('/signed/.well-known/agent-card.json', (_req, res) => {
    res.json({
      ...(AgentCard.toJSON(card) as object),
      signatures: [
        { protected: 'eyJhbGciOiJFUzI1NiIsImtpZCI6ImsxIn0', signature: 'AAAA', header: undefined },
      ],
    });
  });
  const port = (server.address() as AddressInfo).port;
  let current = server;
  return {
    /** Stops answering (connections cut), as a crashed vendor would. */
    down: () =>
      new Promise<void>((r) => {
        current.closeAllConnections();
        current.close(() => r());
      }),
    /** Answers again on the same address. */
    up: async () => {
      current = app.listen(port, '127.0.0.1');
      await new Promise((r) => current.once('listening', r));
    },
    cardUrl: `${base}/.well-known/agent-card.json`,
    signedCardUrl: `${base}/signed/.well-known/agent-card.json`,
    goodSignedCardUrl: `${base}/good/.well-known/agent-card.json`,
    seen,
    canceled,
    close: () =>
      new Promise<void>((r) => {
        current.closeAllConnections();
        current.close(() => r());
      }),
  };
}

describe('A2A outbound: external A2A agents as room participants', () => {
  let parley: TestParley;
  let admin: Agent;
  let vendor: Awaited<ReturnType<typeof vendorAgent>>;
  let helperId: string;
  let worker: Agent;
  let room: string;
  let receiver: OtlpReceiver;

  const texts = async () =>
    (await admin.rooms.room(room).history({ order: 'oldest', limit: 200 })).entries.filter(
      (e: HistoryEntry) => e.message.sender.id === helperId,
    );
  const textOf = (e: HistoryEntry) => e.message.parts.map((p) => (p.type === 'text' ? p.text : '')).join('');

  before(async () => {
    vendor = await vendorAgent();
    receiver = await startOtlpReceiver();
    parley = await startParley({
      gateway: { PARLEY_WEBHOOK_ALLOW_PRIVATE: '127.0.0.1' },
      telemetry: loadTelemetryConfig({
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      }),
      telemetryBatch: { scheduledDelayMillis: 20 },
    });
    const tracer = parley.telemetry?.tracer('person');
    admin = await parley.connect(await readFile(parley.home.paths.adminCreds, 'utf8'), {
      presence: false,
      ...(tracer ? { tracer } : {}),
    });
    const w = await createAgent(admin, { name: 'room-worker' });
    worker = await connectTo(parley, w.creds);
    worker.on('message', async (d) => {
      if (d.message.mentions.includes(w.agent.id))
        await worker.rooms.room(d.room).send('worker here', { replyTo: d.message.id });
    });
    await worker.listening;
  });
  after(async () => {
    await worker?.close();
    await admin?.close();
    await parley?.destroy();
    await vendor?.close();
    await receiver?.close();
  });

  it('parley agent import-a2a registers it as runtime a2a; it is discoverable', async () => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runCli(
      [
        '--json',
        'agent',
        'import-a2a',
        vendor.cardUrl,
        '--owner',
        parley.home.state.admin.id,
        '--server',
        parley.natsUrl,
        '--as',
        parley.home.paths.adminCreds,
      ],
      { out: (l) => out.push(l), err: (l) => err.push(l) },
    );
    assert.equal(code, 0, err.join('\n'));
    const r = JSON.parse(out.join('\n')) as { agent: string; streaming: boolean; signed: boolean };
    helperId = r.agent;
    assert.equal(r.streaming, true);
    assert.equal(r.signed, false);
    const found = await admin.directory.discover({ runtime: 'a2a' } as never);
    assert.ok(JSON.stringify(found).includes(helperId));
  });

  it('verifies a signed card; refuses one whose signature does not verify, and a card on a private address', async () => {
    const owner = parley.home.state.admin.id;
    const signed = await admin.call(a2aApi.importA2a, { cardUrl: vendor.goodSignedCardUrl, owner });
    assert.equal(signed.signed, true);
    assert.equal(
      await codeOf(admin.call(a2aApi.importA2a, { cardUrl: vendor.signedCardUrl, owner })),
      'INVALID_ARGUMENT',
    );
    assert.equal(
      await codeOf(
        admin.call(a2aApi.importA2a, { cardUrl: 'http://10.255.255.1/.well-known/agent-card.json', owner }),
      ),
      'PERMISSION_DENIED',
    );
  });

  it('invited into a room with a human and a Parley agent: answers with the history as context, in one trace', async () => {
    const created = await admin.rooms.create('vendor room', { members: [helperId, worker.id] });
    room = created.id;
    const r = admin.rooms.room(room);
    await r.send('good morning', { mentions: [worker.id] });
    await waitFor(
      async () => (await r.history({ limit: 10 })).entries.some((e) => e.message.sender.id === worker.id),
      'the worker’s answer',
    );
    const sent = await r.send('@helper summarise the morning', { mentions: [helperId] });
    await waitFor(
      async () => (await texts()).some((e) => textOf(e).startsWith('remote: summarise')),
      'the A2A agent’s answer',
    );
    const answer = (await texts()).find((e) => textOf(e).startsWith('remote: summarise')) as HistoryEntry;
    assert.equal(answer.message.replyTo, sent.id);
    assert.match(textOf(answer), /saw [2-9]\d* earlier/);
    // The A2A message id is the Parley message id (a retry is the same message).
    assert.ok(vendor.seen.some((s) => s.messageId === sent.id));
    // One trace: the request's trace id reaches the vendor as traceparent.
    const request = (await r.history({ limit: 20 })).entries.find((e) => e.message.id === sent.id);
    const traceId = request?.message.trace?.traceparent.split('-')[1];
    assert.ok(traceId, 'the message has a trace');
    assert.equal(vendor.seen.find((s) => s.messageId === sent.id)?.traceparent?.split('-')[1], traceId);
    // …and Parley's own spans of that message are in the same trace.
    const spans = await receiver.waitForSpans((all) => all.filter((s) => s.traceId === traceId).length >= 2, {
      what: 'Parley spans of the request (the send and the ingress)',
    });
    assert.ok(spans.filter((s) => s.traceId === traceId).length >= 2);
  });

  it('streams: the working update arrives as a status message before the answer', async () => {
    await admin.rooms.room(room).send('stream the report', { mentions: [helperId] });
    await waitFor(
      async () => (await texts()).some((e) => textOf(e).startsWith('remote: stream')),
      'the streamed answer',
    );
    const mine = await texts();
    const status = mine.findIndex((e) => e.message.kind === 'status' && textOf(e) === 'working on it');
    const final = mine.findIndex((e) => textOf(e).startsWith('remote: stream'));
    assert.ok(status >= 0 && status < final, JSON.stringify(mine.map((e) => [e.message.kind, textOf(e)])));
  });

  it('input-required mentions the humans; their answer continues the same A2A task', async () => {
    const r = admin.rooms.room(room);
    await r.send('ask me something', { mentions: [helperId] });
    await waitFor(async () => (await texts()).some((e) => textOf(e) === 'which region?'), 'the question');
    const q = (await texts()).find((e) => textOf(e) === 'which region?') as HistoryEntry;
    assert.equal(q.message.metadata?.['a2a.state'], 'input-required');
    assert.ok(q.message.mentions.includes(parley.home.state.admin.id));
    await r.send('eu-west', { mentions: [helperId], replyTo: q.message.id });
    await waitFor(
      async () => (await texts()).some((e) => textOf(e) === 'region noted: eu-west'),
      'the follow-up answer',
    );
  });

  it('a cancelled request sends tasks/cancel', async () => {
    const r = admin.rooms.room(room);
    const job = await r.send('slow job please', { mentions: [helperId] });
    await waitFor(
      async () => (await texts()).some((e) => textOf(e) === 'started the long job'),
      'the job to start',
    );
    await r.send('cancel', {
      kind: 'task.update',
      replyTo: job.id,
      mentions: [helperId],
      metadata: { 'a2a.state': 'canceled' },
    });
    await waitFor(() => vendor.canceled.length === 1, 'tasks/cancel at the vendor');
    await waitFor(
      async () =>
        (await texts()).some(
          (e) => e.message.replyTo === job.id && e.message.metadata?.['a2a.state'] === 'canceled',
        ),
      'the cancellation in the room',
    );
  });

  it('unreachable: shows offline, and the message is answered once the agent is back (nothing lost)', async () => {
    const flaky = await vendorAgent('Flaky Vendor');
    try {
      const imported = await admin.call(a2aApi.importA2a, {
        cardUrl: flaky.cardUrl,
        owner: parley.home.state.admin.id,
      });
      const r = admin.rooms.room((await admin.rooms.create('flaky', { members: [imported.agent] })).id);
      const from = async () =>
        (await r.history({ order: 'oldest', limit: 100 })).entries.filter(
          (e) => e.message.sender.id === imported.agent,
        );
      const stateOf = async () =>
        (await admin.call(registryApi.presence, { participants: [imported.agent] })).presence[imported.agent]
          ?.state;
      await r.send('first', { mentions: [imported.agent] });
      await waitFor(
        async () => (await from()).some((e) => textOf(e).startsWith('remote: first')),
        'the first answer',
      );
      await waitFor(async () => (await stateOf()) === 'online', 'online after a successful call');
      await flaky.down();
      const lost = await r.send('while you were down', { mentions: [imported.agent] });
      await waitFor(async () => (await stateOf()) === 'offline', 'offline while unreachable', 20_000);
      await flaky.up();
      await waitFor(
        async () =>
          (await from()).some(
            (e) => e.message.replyTo === lost.id && textOf(e).startsWith('remote: while you were down'),
          ),
        'the answer after the agent came back',
        40_000,
      );
      assert.equal(flaky.seen.filter((x) => x.messageId === lost.id).length, 1);
    } finally {
      await flaky.close();
    }
  });
});
