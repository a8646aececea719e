/**
 * A2A: external A2A agents as Parley participants (runtime `a2a`). The gateway imports an agent from
 * its A2A card and proxies room messages to it (see services/gateway/src/a2a/remote.ts).
 */
import * as z from 'zod';
import { defineApi } from './api.js';
import { AgentId, MessageId, ParticipantId, RoomId, TokenId, UserId } from './ids.js';
import { named } from './registry-of-schemas.js';

/**
 * The A2A extension under which the gateway sends a signed delegation token with every call to an
 * imported agent. A2A keeps identity out of the JSON-RPC payload (transport layer): the token goes in
 * the {@link A2A_DELEGATION_HEADER} header and the call lists this URI in `A2A-Extensions`
 * (`X-A2A-Extensions` for v0.3), so a callee that declares the extension on its card knows to
 * verify it (JWKS at the gateway's `/a2a/jwks.json`). See docs/a2a.md.
 */
export const A2A_DELEGATION_EXTENSION = 'urn:parley:a2a:extension:delegation:v1';
/** The HTTP header carrying the delegation token of an outbound A2A call. */
export const A2A_DELEGATION_HEADER = 'Parley-Delegation';

/**
 * The claims of the delegation token of one outbound A2A call (compact JWS, EdDSA, the keys of
 * delegation tokens). Shaped like a delegation token (RFC 8693 `sub` + nested `act`), but with the
 * callee's card URL as `aud` (never `parley`, so no Parley ingress accepts it) and the call it is for.
 */
export const A2aCallClaims = named(
  'A2aCallClaims',
  z.object({
    iss: z.literal('parley'),
    aud: z.array(z.url()).length(1).describe("The callee's agent card URL."),
    sub: ParticipantId.describe(
      'Whose authority the call carries: the human of the delegation chain, or the sender acting on its own.',
    ),
    act: z
      .object({ sub: ParticipantId })
      .loose()
      .describe('RFC 8693 actor: the imported A2A agent, earlier actors nested (first deepest).'),
    scope: z.string().max(8000).describe('Space-separated scopes of the chain (empty without a delegation).'),
    jti: TokenId,
    iat: z.int().min(0),
    exp: z.int().min(0),
    room: RoomId,
    sender: ParticipantId.describe('Who sent the room message the call carries.'),
    messageId: MessageId.describe('The Parley message id = the A2A messageId.'),
    taskId: z.string().max(200).optional().describe('The remote A2A task the call continues or cancels.'),
    parent: TokenId.optional().describe('jti of the delegation token the chain comes from.'),
  }),
);
export type A2aCallClaims = z.infer<typeof A2aCallClaims>;

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

/**
 * A streaming call of an imported agent in progress (`parley_gateway` key
 * `a2a.rrun.<agentId>.<messageId>`): what a replica needs to resubscribe to the remote task when the
 * one streaming it died (its lease `gateway-a2a-run.<agentId>.<messageId>` in `parley_leases` lapsed),
 * and which of its events are already in the room (so each arrives there once).
 */
export const A2aRemoteRun = named(
  'A2aRemoteRun',
  z.object({
    agent: AgentId,
    room: RoomId,
    messageId: MessageId.describe('The room message (the A2A messageId) the task answers.'),
    sender: ParticipantId,
    tokenId: TokenId.optional().describe('The delegation the message carried.'),
    traceparent: z.string().max(200).optional(),
    taskId: z.string().min(1).max(200),
    contextId: z.string().max(200),
    humans: z.array(ParticipantId).max(100).describe('Whom an input-required question mentions.'),
    posted: z.array(z.string().max(300)).max(2000).describe('Keys of the remote events already posted.'),
    startedAt: z.iso.datetime(),
  }),
);
export type A2aRemoteRun = z.infer<typeof A2aRemoteRun>;

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
