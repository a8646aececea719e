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
import type { AddressInfo } from 'node:net';
import { type AgentCard, type Message, Role } from '@a2a-js/sdk';
import {
  type Client,
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
} from '@a2a-js/sdk/client';
import { AgentEvent, type AgentExecutor, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { gatewayApi } from '@parley/contracts';
import express from 'express';
import { connectAdmin, connectTo, createAgent, startParley } from '../harness/index.js';
import { percentiles, progress } from './stats.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SEQ = Number(process.env.BENCH_A2A_SENDS ?? 200);

let counter = 0;
const message = (text: string): Message => ({
  messageId: `b${process.pid}-${++counter}`,
  contextId: '',
  taskId: '',
  role: Role.ROLE_USER,
  parts: [
    { content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: 'text/plain' },
  ],
  metadata: undefined,
  extensions: [],
  referenceTaskIds: [],
});
const params = (contextId = '') => ({
  tenant: '',
  message: { ...message('ping'), contextId },
  configuration: undefined,
  metadata: undefined,
});

async function directServer(): Promise<{ url: string; close(): Promise<void> }> {
  const executor: AgentExecutor = {
    async execute(ctx, bus) {
      bus.publish(
        AgentEvent.message({
          ...message('echo'),
          parts: ctx.userMessage.parts,
          role: Role.ROLE_AGENT,
          contextId: ctx.contextId,
        }),
      );
      bus.finished();
    },
    async cancelTask() {},
  };
  const app = express();
  const server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  const port = (server.address() as AddressInfo).port;
  const card = {
    name: 'echo',
    description: 'echoes',
    supportedInterfaces: [
      {
        url: `http://127.0.0.1:${port}/jsonrpc`,
        protocolBinding: 'JSONRPC',
        tenant: '',
        protocolVersion: '1.0',
      },
    ],
    provider: undefined,
    version: '1.0.0',
    capabilities: { streaming: false, pushNotifications: false, extensions: [] },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [],
    signatures: [],
  } as unknown as AgentCard;
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);
  app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler }));
  app.use('/jsonrpc', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  return {
    url: `http://127.0.0.1:${port}/.well-known/agent-card.json`,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

async function clientOf(cardUrl: string, token?: string): Promise<Client> {
  const fetchImpl: typeof fetch = (input, init) => {
    const headers = new Headers(init?.headers);
    if (token) headers.set('authorization', `Bearer ${token}`);
    return fetch(input, { ...init, headers });
  };
  const card = await new DefaultAgentCardResolver({ fetchImpl }).resolve(cardUrl, '');
  return new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl })],
    }),
  ).createFromAgentCard({
    ...card,
    supportedInterfaces: card.supportedInterfaces.filter(
      (i) => i.protocolBinding === 'JSONRPC' && i.protocolVersion === '1.0',
    ),
  });
}

const parley = await startParley();
const direct = await directServer();
try {
  const admin = await connectAdmin(parley);
  const w = await createAgent(admin, { name: 'bench-a2a-echo' });
  const worker = await connectTo(parley, w.creds);
  worker.on('message', async (d) => {
    await worker.rooms.room(d.room).send(d.message.parts, { replyTo: d.message.id });
  });
  await worker.listening;
  const c = await createAgent(admin, { name: 'bench-a2a-caller' });
  const key = (await admin.call(gatewayApi.createKey, { agent: c.agent.id })).key;
  const viaParley = await clientOf(`${parley.httpUrl}/a2a/${w.agent.id}/.well-known/agent-card.json`, key);
  const viaDirect = await clientOf(direct.url);
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
  await worker.close();
  await admin.close();
} finally {
  await direct.close();
  await parley.destroy();
}
