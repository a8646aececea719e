/**
 * A vendor's A2A agent for the gateway tests: real HTTP (express), the official `@a2a-js/sdk` server,
 * an unsigned card, a signed one, and one whose signature cannot verify. Once it `trust`s a JWKS
 * (the gateway's `/a2a/jwks.json`) it refuses every JSON-RPC call without a valid Parley delegation
 * token (HTTP 401) and keeps the verified claims.
 *
 * What it does with a message: `ask…` → input-required; `slow…` → working, then waits until
 * cancelled; `long…` → "step 1 of 3", then one step per `step()` ("step 2 of 3", then the artifact
 * "long result" and completed); otherwise (`stream…` adds a working update) an artifact
 * "remote: <text> (saw N earlier)" and completed.
 */
import type { AddressInfo } from 'node:net';
import { AgentCard, generateAgentCardSignature, type Message, Role, TaskState } from '@a2a-js/sdk';
import { AgentEvent, type AgentExecutor, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { A2A_DELEGATION_HEADER, type A2aCallClaims } from '@parley/contracts';
import express from 'express';
import { createRemoteJWKSet, exportJWK, generateKeyPair, type JWTVerifyGetKey, jwtVerify } from 'jose';

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
export async function vendorAgent(name = 'Vendor Helper') {
  const seen: { text: string; history: number; traceparent?: string; messageId: string }[] = [];
  const canceled: string[] = [];
  const waiting = new Map<string, () => void>();
  // `long` tasks: the next step of each, released by step().
  const steps: (() => void)[] = [];
  const longTasks: string[] = [];
  const resubscribed: string[] = [];
  const delegations: (A2aCallClaims & { token: string })[] = [];
  const refusedTokens: string[] = [];
  let jwks: JWTVerifyGetKey | undefined;
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
      } else if (text.includes('long')) {
        longTasks.push(taskId);
        update(TaskState.TASK_STATE_WORKING, 'step 1 of 3');
        await new Promise<void>((r) => steps.push(r));
        update(TaskState.TASK_STATE_WORKING, 'step 2 of 3');
        await new Promise<void>((r) => steps.push(r));
        bus.publish(
          AgentEvent.artifactUpdate({
            taskId,
            contextId,
            artifact: {
              artifactId: 'long-1',
              name: 'result',
              description: '',
              parts: agentMsg('long result', contextId, taskId).parts,
              metadata: undefined,
              extensions: [],
            },
            append: false,
            lastChunk: true,
            metadata: undefined,
          }),
        );
        update(TaskState.TASK_STATE_COMPLETED);
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
  const cardUrl = `${base}/.well-known/agent-card.json`;
  /** Verifies a Parley delegation token as a callee would: the gateway's JWKS, aud = this card. */
  const verify = async (token: string, at?: Date) => {
    if (!jwks) throw new Error('no JWKS trusted yet');
    const { payload } = await jwtVerify(token, jwks, {
      issuer: 'parley',
      audience: cardUrl,
      algorithms: ['EdDSA'],
      ...(at ? { currentDate: at } : {}),
    });
    return payload as unknown as A2aCallClaims;
  };
  // Calls without a valid delegation token are refused before the SDK sees them.
  app.use('/jsonrpc', async (req, res, next) => {
    if (!jwks || req.method !== 'POST') return next();
    try {
      const token = String(req.headers[A2A_DELEGATION_HEADER.toLowerCase()] ?? '');
      delegations.push({ ...(await verify(token)), token });
      next();
    } catch (err) {
      refusedTokens.push((err as { code?: string }).code ?? String(err));
      res.status(401).json({ jsonrpc: '2.0', id: null, error: { code: -32001, message: 'bad delegation' } });
    }
  });
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
  const resubscribe = handler.resubscribe.bind(handler);
  handler.resubscribe = (params, context) => {
    resubscribed.push(params.id);
    return resubscribe(params, context);
  };
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
    cardUrl,
    jsonRpcUrl: `${base}/jsonrpc`,
    /** From now on every call must carry a Parley delegation token that verifies with `jwksUrl`. */
    trust(jwksUrl: string) {
      jwks = createRemoteJWKSet(new URL(jwksUrl));
    },
    verify,
    delegations,
    refusedTokens,
    resubscribed,
    longTasks,
    /** Lets the oldest waiting `long` task take its next step. */
    step() {
      const next = steps.shift();
      if (!next) throw new Error('no long task is waiting for a step');
      next();
    },
    waitingSteps: () => steps.length,
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
