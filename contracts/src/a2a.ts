/**
 * A2A: external A2A agents as Parley participants (runtime `a2a`). The gateway imports an agent from
 * its A2A card and proxies room messages to it (see services/gateway/src/a2a/remote.ts).
 */
import * as z from 'zod';
import { defineApi } from './api.js';
import { AgentId, UserId } from './ids.js';
import { named } from './registry-of-schemas.js';

/** How the gateway authenticates to a remote A2A agent. */
export const A2aAuth = named(
  'A2aAuth',
  z
    .string()
    .regex(/^bearer:[A-Za-z0-9_.-]{1,200}$/, { message: 'bearer:<secret-ref>' })
    .describe(
      'bearer:<secret-ref>: the bearer token is read from the gateway environment variable PARLEY_A2A_SECRET_<REF> (upper-cased, - and . as _); the secret itself never enters Parley.',
    ),
);

/** An imported A2A agent as the gateway keeps it (`parley_gateway` key `a2a.remote.<agentId>`). */
export const A2aRemoteRecord = named(
  'A2aRemoteRecord',
  z.object({
    agent: AgentId,
    cardUrl: z.url(),
    /** The card as fetched (A2A v1.0 JSON), normalized by the SDK. */
    card: z.record(z.string(), z.unknown()),
    url: z.url().describe('The JSON-RPC endpoint the proxy calls.'),
    protocolVersion: z.string(),
    streaming: z.boolean(),
    signed: z.boolean().describe('The card carried signatures and they verified.'),
    auth: A2aAuth.optional(),
    importedBy: z.string(),
    importedAt: z.iso.datetime(),
  }),
);
export type A2aRemoteRecord = z.infer<typeof A2aRemoteRecord>;

/** The A2A side of the gateway's API (`parley agent import-a2a`). */
export const a2aApi = {
  importA2a: defineApi({
    service: 'a2a',
    method: 'importA2a',
    summary:
      'Fetch and validate an A2A agent card (its signatures checked when it is signed), register an agent of runtime a2a with that card for `owner`, and proxy room messages to it. The caller needs the right to create an agent for `owner`.',
    access: 'participant',
    request: named(
      'ImportA2aRequest',
      z.object({ cardUrl: z.url({ protocol: /^https?$/ }), owner: UserId, auth: A2aAuth.optional() }),
    ),
    response: named(
      'ImportA2aResponse',
      z.object({ agent: AgentId, name: z.string(), streaming: z.boolean(), signed: z.boolean() }),
    ),
  }),
} as const;
