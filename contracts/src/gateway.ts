/**
 * The gateway's NATS API: API keys for systems, inbound webhooks (`/v1/hooks/<id>`) and outbound
 * webhooks (an agent's inbox as signed HTTP POSTs). Everything is kept by the gateway in KV bucket
 * `parley_gateway`; secrets of API keys only as SHA-256, webhook secrets as they must be (HMAC).
 */
import * as z from 'zod';
import { defineApi } from './api.js';
import { AgentId, ApiKeyId, HookId, ParticipantId, RoomId } from './ids.js';
import { named } from './registry-of-schemas.js';

/** What an API key may do at the gateway: `read` (GET routes and the live stream), `write` (the rest). */
export const ApiKeyScope = named('ApiKeyScope', z.enum(['read', 'write']));
export type ApiKeyScope = z.infer<typeof ApiKeyScope>;

/** An API key as listed (never its secret). */
export const ApiKeyInfo = named(
  'ApiKeyInfo',
  z.object({
    id: ApiKeyId,
    agent: AgentId.describe('The one agent the key acts as.'),
    label: z.string(),
    scopes: z.array(ApiKeyScope),
    createdBy: ParticipantId,
    createdAt: z.iso.datetime(),
    expiresAt: z.iso.datetime().optional(),
    revokedAt: z.iso.datetime().optional(),
  }),
);
export type ApiKeyInfo = z.infer<typeof ApiKeyInfo>;

/** An API key as stored (`key.<id>` in `parley_gateway`). */
export const ApiKeyRecord = named('ApiKeyRecord', ApiKeyInfo.extend({ secretSha256: z.string() }));
export type ApiKeyRecord = z.infer<typeof ApiKeyRecord>;

/** How an inbound webhook's body becomes a message. */
export const HookInfo = named(
  'HookInfo',
  z.object({
    id: HookId,
    agent: AgentId.describe('The bridge agent the hook speaks as.'),
    room: RoomId.describe('The room it posts to (for a hook to an agent: their direct room).'),
    participant: ParticipantId.optional().describe('Set when the hook was made to speak to one participant.'),
    template: z
      .string()
      .max(4000)
      .optional()
      .describe('Text of the message; {{a.b}} is replaced by that field of the JSON body.'),
    includeData: z.boolean().describe('Attach the JSON body as a data part.'),
    label: z.string(),
    createdBy: ParticipantId,
    createdAt: z.iso.datetime(),
  }),
);
export type HookInfo = z.infer<typeof HookInfo>;

/** An inbound webhook as stored (`hook.<id>`): the HMAC secret must be kept to verify signatures. */
export const HookRecord = named('HookRecord', HookInfo.extend({ secret: z.string() }));
export type HookRecord = z.infer<typeof HookRecord>;

/** An outbound webhook: where an agent's inbox is POSTed. */
export const WebhookInfo = named(
  'WebhookInfo',
  z.object({
    agent: AgentId,
    url: z.url({ protocol: /^https?$/ }),
    maxAttempts: z.int().min(1).max(20).describe('Tries before a delivery is dead-lettered.'),
    createdBy: ParticipantId,
    createdAt: z.iso.datetime(),
  }),
);
export type WebhookInfo = z.infer<typeof WebhookInfo>;

/** An outbound webhook as stored (`webhook.<agent>`). */
export const WebhookRecord = named('WebhookRecord', WebhookInfo.extend({ secret: z.string() }));
export type WebhookRecord = z.infer<typeof WebhookRecord>;

/** A delivery an outbound webhook gave up on (`webhook.dlq.<agent>.<room>.<seq>`). */
export const WebhookDeadLetter = named(
  'WebhookDeadLetter',
  z.object({
    agent: AgentId,
    room: RoomId,
    roomSeq: z.int().min(1),
    messageId: z.string(),
    attempts: z.int().min(1),
    lastError: z.string(),
    at: z.iso.datetime(),
  }),
);
export type WebhookDeadLetter = z.infer<typeof WebhookDeadLetter>;

/** Keys of `parley_gateway`. */
export const gatewayKeys = {
  apiKey: (id: string) => `key.${id}`,
  hook: (id: string) => `hook.${id}`,
  /** An event id a hook accepted (its value: the message id): the same event twice is stored once. */
  hookEvent: (hookId: string, eventHash: string) => `hookevt.${hookId}.${eventHash}`,
  session: (id: string) => `session.${id}`,
  login: (codeHash: string) => `login.${codeHash}`,
  /** An OIDC subject linked to a user: `oidc.<sha256(iss)>.<sha256(sub)>`. */
  oidc: (issuerHash: string, subjectHash: string) => `oidc.${issuerHash}.${subjectHash}`,
  webhook: (agent: string) => `webhook.${agent}`,
  deadLetter: (agent: string, room: string, seq: number) => `webhook.dlq.${agent}.${room}.${seq}`,
  /** The last room positions a participant's live stream acknowledged. */
  cursor: (participant: string) => `cursor.${participant}`,
} as const;

const Label = z.string().trim().max(100).default('');

/**
 * A method of the gateway's API: every one is served by the gateway to participants, with named
 * request and response schemas (the names the protocol docs and JSON Schemas use).
 */
function gatewayMethod<Req extends z.ZodType, Res extends z.ZodType>(
  method: string,
  o: { summary: string; effect?: 'read'; request: [string, Req]; response: [string, Res] },
) {
  return defineApi({
    service: 'gateway',
    method,
    summary: o.summary,
    access: 'participant',
    ...(o.effect ? { effect: o.effect } : {}),
    request: named(o.request[0], o.request[1]),
    response: named(o.response[0], o.response[1]),
  });
}

/** The gateway's API (served by the gateway over NATS; the CLI's `parley key|hook|webhook`). */
export const gatewayApi = {
  createKey: gatewayMethod('createKey', {
    summary:
      'Mint an API key that acts as exactly one agent at the gateway (the agent itself, its owner or an admin of its org). The key is returned once; only its hash is stored.',
    request: [
      'CreateApiKeyRequest',
      z.object({
        agent: AgentId,
        label: Label,
        scopes: z.array(ApiKeyScope).min(1).default(['read', 'write']),
        ttlDays: z.int().min(1).max(3650).optional().describe('Unset: the key does not expire.'),
      }),
    ],
    response: ['CreateApiKeyResponse', z.object({ key: z.string(), info: ApiKeyInfo })],
  }),
  listKeys: gatewayMethod('listKeys', {
    effect: 'read',
    summary: 'The API keys of an agent (the agent, its owner or an admin of its org); never their secrets.',
    request: ['ListApiKeysRequest', z.object({ agent: AgentId })],
    response: ['ListApiKeysResponse', z.object({ keys: z.array(ApiKeyInfo) })],
  }),
  revokeKey: gatewayMethod('revokeKey', {
    summary: 'Revoke an API key at once (the agent, its owner or an admin of its org).',
    request: ['RevokeApiKeyRequest', z.object({ id: ApiKeyId })],
    response: ['RevokeApiKeyResponse', z.object({ id: ApiKeyId, revoked: z.boolean() })],
  }),
  createHook: gatewayMethod('createHook', {
    summary:
      'Create an inbound webhook for a bridge agent that posts to a room (or to one participant, in their direct room). Returns the signing secret once (Standard Webhooks whsec_ form; GitHub-style hooks use the same secret).',
    request: [
      'CreateHookRequest',
      z
        .object({
          agent: AgentId,
          room: RoomId.optional(),
          participant: ParticipantId.optional(),
          template: z.string().max(4000).optional(),
          includeData: z.boolean().default(true),
          label: Label,
        })
        .refine((r) => (r.room === undefined) !== (r.participant === undefined), {
          message: 'give exactly one of room and participant',
        }),
    ],
    response: ['CreateHookResponse', z.object({ info: HookInfo, secret: z.string(), path: z.string() })],
  }),
  listHooks: gatewayMethod('listHooks', {
    effect: 'read',
    summary: 'The inbound webhooks of a bridge agent (never their secrets).',
    request: ['ListHooksRequest', z.object({ agent: AgentId })],
    response: ['ListHooksResponse', z.object({ hooks: z.array(HookInfo) })],
  }),
  rotateHookSecret: gatewayMethod('rotateHookSecret', {
    summary: 'A new signing secret for a hook; the old one stops verifying at once.',
    request: ['RotateHookSecretRequest', z.object({ id: HookId })],
    response: ['RotateHookSecretResponse', z.object({ info: HookInfo, secret: z.string() })],
  }),
  deleteHook: gatewayMethod('deleteHook', {
    summary: 'Delete an inbound webhook.',
    request: ['DeleteHookRequest', z.object({ id: HookId })],
    response: ['DeleteHookResponse', z.object({ id: HookId, deleted: z.boolean() })],
  }),
  setWebhook: gatewayMethod('setWebhook', {
    summary:
      'Deliver an agent’s inbox as Standard-Webhooks-signed POSTs to a URL (in order per room, retried with backoff, dead-lettered after maxAttempts). Private and loopback addresses are refused unless the operator allows them. Returns the signing secret once.',
    request: [
      'SetWebhookRequest',
      z.object({
        agent: AgentId,
        url: z.url({ protocol: /^https?$/ }),
        maxAttempts: z.int().min(1).max(20).default(8),
      }),
    ],
    response: ['SetWebhookResponse', z.object({ info: WebhookInfo, secret: z.string() })],
  }),
  getWebhook: gatewayMethod('getWebhook', {
    effect: 'read',
    summary: 'An agent’s outbound webhook and its dead letters.',
    request: ['GetWebhookRequest', z.object({ agent: AgentId })],
    response: [
      'GetWebhookResponse',
      z.object({ info: WebhookInfo, deadLetters: z.array(WebhookDeadLetter) }),
    ],
  }),
  deleteWebhook: gatewayMethod('deleteWebhook', {
    summary: 'Stop delivering an agent’s inbox to its URL.',
    request: ['DeleteWebhookRequest', z.object({ agent: AgentId })],
    response: ['DeleteWebhookResponse', z.object({ deleted: z.boolean() })],
  }),
  replayWebhook: gatewayMethod('replayWebhook', {
    summary:
      'POST a room’s messages after a position to the agent’s webhook again (from the room log), in order.',
    request: ['ReplayWebhookRequest', z.object({ agent: AgentId, room: RoomId, after: z.int().min(0) })],
    response: ['ReplayWebhookResponse', z.object({ delivered: z.int().min(0) })],
  }),
} as const;
