/**
 * A2A round trip through Parley vs direct A2A, same SDK, same machine, same process:
 *
 * - `direct`  an `@a2a-js/sdk` echo server (express, JSON-RPC, in-memory task store) called by the
 *             SDK's client: the baseline;
 * - `parley`  the same client calling a Parley agent through the gateway (`/a2a/<agentId>`): the
 *             A2A call authenticated with an API key, sent into the caller's direct room over its
 *             own NATS connection, handled by an ordinary SDK handler, its reply read from the
 *             caller's inbox and returned as a completed task (task record in KV).
 *
 * Interleaved rounds, blocking `message/send`, sequential (latency). Run:
 * pnpm --filter @parley/test bench:a2a
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Client } from '@a2a-js/sdk/client';
import { gatewayApi } from '@parley/contracts';
import { a2aClient, connectAdmin, connectTo, createAgent, startParley } from '../harness/index.js';
import { startEchoServer, userMessage } from './a2a-echo.js';
import { percentiles, progress } from './stats.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SEQ = Number(process.env.BENCH_A2A_SENDS ?? 200);

const PUSHES = Number(process.env.BENCH_A2A_PUSHES ?? 100);
const params = (contextId = '') => ({
  tenant: '',
  message: userMessage('ping', contextId),
  configuration: undefined,
  metadata: undefined,
});

const clientOf = (cardUrl: string, token?: string) => a2aClient(cardUrl, token ? { token } : {});

// Push targets on loopback are allowed for the push measurement.
const parley = await startParley({ gateway: { PARLEY_WEBHOOK_ALLOW_PRIVATE: '127.0.0.1' } });
const direct = await startEchoServer();
try {
  const admin = await connectAdmin(parley);
  const w = await createAgent(admin, { name: 'bench-a2a-echo' });
  const worker = await connectTo(parley, w.creds);
  // When the agent sent each reply (by A2A task id), for the push delivery latency.
  const repliedAt = new Map<string, number>();
  worker.on('message', async (d) => {
    repliedAt.set(String(d.message.metadata?.['a2a.task'] ?? ''), performance.now());
    await worker.rooms.room(d.room).send(d.message.parts, { replyTo: d.message.id });
  });
  await worker.listening;
  const c = await createAgent(admin, { name: 'bench-a2a-caller' });
  const key = (await admin.call(gatewayApi.createKey, { agent: c.agent.id })).key;
  const viaParley = await clientOf(`${parley.httpUrl}/a2a/${w.agent.id}/.well-known/agent-card.json`, key);
  const viaDirect = await clientOf(direct.cardUrl);
  // One context per side, as a conversation would have (the direct room is made once).
  const first = (await viaParley.sendMessage(params())) as { contextId: string };
  const ctx = first.contextId;

  const run = async (client: Client, contextId: string) => {
    const rtts: number[] = [];
    for (let i = 0; i < SEQ; i++) {
      const t = performance.now();
      await client.sendMessage(params(contextId));
      rtts.push(performance.now() - t);
    }
    return rtts;
  };
  for (let i = 0; i < 30; i++) {
    await viaDirect.sendMessage(params());
    await viaParley.sendMessage(params(ctx));
  }
  const all = { direct: [] as number[], parley: [] as number[] };
  for (let r = 0; r < ROUNDS; r++) {
    all.direct.push(...(await run(viaDirect, '')));
    all.parley.push(...(await run(viaParley, ctx)));
    progress(`a2a round ${r + 1}/${ROUNDS}`);
  }
  const d = percentiles(all.direct);
  const p = percentiles(all.parley);
  const line = `A2A message/send round trip (${ROUNDS}×${SEQ} sequential): direct p50 ${d.p50} ms p99 ${d.p99} ms; through Parley p50 ${p.p50} ms p99 ${p.p99} ms; ratio p50 ${(p.p50 / d.p50).toFixed(1)}× p99 ${(p.p99 / d.p99).toFixed(1)}×`;
  console.log(line);

  // Push delivery: a non-blocking send with a push config; from the agent's reply to the
  // COMPLETED notification at a loopback receiver (gateway → task event → pinned POST).
  const arrivals = new Map<string, number>();
  let arrived: (() => void) | undefined;
  const receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => {
      body += c;
    });
    req.on('end', () => {
      const update = (JSON.parse(body) as { statusUpdate?: { taskId: string; status?: { state?: string } } })
        .statusUpdate;
      if (update?.status?.state === 'TASK_STATE_COMPLETED') {
        arrivals.set(update.taskId, performance.now());
        arrived?.();
      }
      res.end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const pushUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/push`;
  const pushes: number[] = [];
  for (let i = 0; i < PUSHES; i++) {
    const done = new Promise<void>((r) => {
      arrived = r;
    });
    const task = (await viaParley.sendMessage({
      tenant: '',
      message: userMessage('push me', ctx),
      configuration: {
        acceptedOutputModes: [],
        historyLength: undefined,
        returnImmediately: true,
        taskPushNotificationConfig: {
          tenant: '',
          id: '',
          taskId: '',
          url: pushUrl,
          token: '',
          authentication: undefined,
        },
      },
      metadata: undefined,
    })) as { id: string };
    await done;
    const sent = repliedAt.get(task.id);
    const got = arrivals.get(task.id);
    if (sent !== undefined && got !== undefined) pushes.push(got - sent);
  }
  const push = percentiles(pushes);
  console.log(
    `A2A push delivery (${pushes.length} of ${PUSHES}, agent reply → COMPLETED notification received): p50 ${push.p50} ms p99 ${push.p99} ms`,
  );
  receiver.closeAllConnections();
  receiver.close();
  await worker.close();
  await admin.close();
} finally {
  await direct.close();
  await parley.destroy();
}
