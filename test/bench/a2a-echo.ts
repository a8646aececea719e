/**
 * What the A2A benches share: an `@a2a-js/sdk` echo agent on loopback (express, JSON-RPC, in-memory
 * task store, no persistence, no fan-out) — the peer a user would pick instead of Parley — and the
 * user messages they send.
 */
import type { AddressInfo } from 'node:net';
import type { AgentCard, Message } from '@a2a-js/sdk';
import { Role } from '@a2a-js/sdk';
import { AgentEvent, type AgentExecutor, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import express from 'express';
import { a2aMessage } from '../harness/a2a.js';

/** A user message with a fresh id. */
export const userMessage = (text: string, contextId = ''): Message => a2aMessage(text, { contextId });

/** Starts the echo agent: its base URL (card at `/.well-known/agent-card.json`) and how to stop it. */
export async function startEchoServer(): Promise<{ base: string; cardUrl: string; close(): Promise<void> }> {
  const executor: AgentExecutor = {
    async execute(ctx, bus) {
      bus.publish(
        AgentEvent.message({
          ...userMessage('echo'),
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
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const card = {
    name: 'echo',
    description: 'echoes',
    supportedInterfaces: [
      { url: `${base}/jsonrpc`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' },
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
    base,
    cardUrl: `${base}/.well-known/agent-card.json`,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
