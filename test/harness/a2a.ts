/** A2A test clients: the official `@a2a-js/sdk` client against a card URL, and user messages. */
import type { AgentCard, Message } from '@a2a-js/sdk';
import { Role } from '@a2a-js/sdk';
import {
  type Client,
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from '@a2a-js/sdk/client';

let counter = 0;

/** An A2A user message with a fresh id (in `contextId`, continuing `taskId` when given). */
export const a2aMessage = (text: string, o: { taskId?: string; contextId?: string } = {}): Message => ({
  messageId: `a2a-${process.pid}-${++counter}`,
  contextId: o.contextId ?? '',
  taskId: o.taskId ?? '',
  role: Role.ROLE_USER,
  parts: [
    { content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: 'text/plain' },
  ],
  metadata: undefined,
  extensions: [],
  referenceTaskIds: [],
});

/**
 * An SDK client for the agent whose card is at `cardUrl`, over JSON-RPC (or HTTP+JSON) of
 * `version` (v0.3 through the SDK's legacy mode), sending `Authorization: Bearer <token>` when given.
 */
export async function a2aClient(
  cardUrl: string,
  o: { token?: string; version?: '1.0' | '0.3'; binding?: 'JSONRPC' | 'HTTP+JSON' } = {},
): Promise<Client> {
  const binding = o.binding ?? 'JSONRPC';
  const fetchImpl: typeof fetch = (input, init) => {
    const headers = new Headers(init?.headers);
    if (o.token) headers.set('authorization', `Bearer ${o.token}`);
    return fetch(input, { ...init, headers });
  };
  const legacyCompat = { enabled: true };
  const card: AgentCard = await new DefaultAgentCardResolver({ fetchImpl }).resolve(cardUrl, '');
  return new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [
        binding === 'JSONRPC'
          ? new JsonRpcTransportFactory({ fetchImpl, legacyCompat })
          : new RestTransportFactory({ fetchImpl, legacyCompat }),
      ],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl, legacyCompat }),
      preferredTransports: [binding],
    }),
  ).createFromAgentCard({
    ...card,
    supportedInterfaces: card.supportedInterfaces.filter(
      (i) => i.protocolBinding === binding && i.protocolVersion === (o.version ?? '1.0'),
    ),
  });
}
