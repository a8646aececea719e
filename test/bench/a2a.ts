/**
 * The peer a user would pick instead: A2A JSON-RPC over HTTP with the official @a2a-js/sdk, an echo
 * agent on loopback (no persistence, no fan-out), measured with the SDK's own client.
 */
import type { AddressInfo } from 'node:net';
import { type AgentCard, type Message, Role } from '@a2a-js/sdk';
import { ClientFactory } from '@a2a-js/sdk/client';
import { AgentEvent, type AgentExecutor, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import express from 'express';
import { percentiles, progress } from './stats.js';

export interface A2aResult {
  perSec: number;
  roundTripMs: { p50: number; p99: number };
}

let counter = 0;
const message = (text: string): Message => ({
  messageId: `m${++counter}`,
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

export async function benchA2a(o: {
  payloadBytes: number;
  sequential: number;
  concurrency: number;
  seconds: number;
}): Promise<A2aResult> {
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
  const card: AgentCard = {
    name: 'echo',
    description: 'echoes',
    supportedInterfaces: [
      {
        url: `http://127.0.0.1:${port}/a2a/jsonrpc`,
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
  app.use(
    '/a2a/jsonrpc',
    jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }),
  );
  const client = await new ClientFactory().createFromUrl(`http://127.0.0.1:${port}`);
  const payload = 'x'.repeat(o.payloadBytes);
  const params = () => ({
    tenant: '',
    message: message(payload),
    configuration: undefined,
    metadata: undefined,
  });

  for (let i = 0; i < 200; i++) await client.sendMessage(params());
  const rtts: number[] = [];
  for (let i = 0; i < o.sequential; i++) {
    const t = performance.now();
    await client.sendMessage(params());
    rtts.push(performance.now() - t);
  }
  const rt = percentiles(rtts);
  progress(`a2a: sequential round trip p50 ${rt.p50} ms p99 ${rt.p99} ms`);
  let done = 0;
  const deadline = performance.now() + o.seconds * 1000;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: o.concurrency }, async () => {
      while (performance.now() < deadline) {
        await client.sendMessage(params());
        done++;
      }
    }),
  );
  const perSec = Math.round(done / ((performance.now() - start) / 1000));
  progress(`a2a: ${o.concurrency} concurrent clients ${perSec} msg/s`);
  await new Promise((r) => server.close(r));
  return { perSec, roundTripMs: { p50: rt.p50, p99: rt.p99 } };
}
