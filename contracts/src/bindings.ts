/**
 * Runtime bindings and the MCP bridge's access tokens, both kept by the MCP service in KV bucket
 * `parley_bindings`.
 *
 * A binding ties a session of some runtime (a Claude Code or Codex MCP session, a LangGraph thread,
 * any `{runtime, externalId}`) to the participant it acts as, with the rooms it took part in and the
 * last room position it returned per room. A restarted session with the same key finds its
 * conversations and resumes reading where the previous one stopped.
 */
import * as z from 'zod';
import { defineApi } from './api.js';
import { AgentId, McpTokenId, ParticipantId, RoomId } from './ids.js';
import { named } from './registry-of-schemas.js';

/** A runtime's name in a binding key: `claude-code`, `codex`, `langgraph`, `mcp-http`, … */
export const BindingRuntime = named(
  'BindingRuntime',
  z
    .string()
    .min(1)
    .max(40)
    .regex(/^[a-z0-9][a-z0-9_-]*$/, { message: 'lowercase letters, digits, _ and -' })
    .describe('The runtime the session lives in, e.g. claude-code, codex, langgraph.'),
);

/** The runtime's own id of the session: an MCP session id, a LangGraph thread_id or run id. */
export const ExternalId = named(
  'ExternalId',
  z.string().min(1).max(200).describe('The runtime’s id of the session (any string).'),
);

/** What a binding remembers of one room. */
export const BoundRoom = named(
  'BoundRoom',
  z.object({
    lastReturned: z
      .int()
      .min(0)
      .describe('Room sequence of the last message handed to the session (0 = none yet).'),
    since: z.iso.datetime().describe('When the session first took part in the room.'),
  }),
);
export type BoundRoom = z.infer<typeof BoundRoom>;

/** A runtime binding (`parley_bindings`, key {@link bindingKeys.binding}). */
export const RuntimeBinding = named(
  'RuntimeBinding',
  z.object({
    participant: ParticipantId.describe('Who the session acts as.'),
    runtime: BindingRuntime,
    externalId: ExternalId,
    rooms: z.record(RoomId, BoundRoom).describe('Rooms the session took part in, by id.'),
    session: z
      .string()
      .max(200)
      .optional()
      .describe('The latest transport session id (e.g. Mcp-Session-Id).'),
    createdAt: z.iso.datetime(),
    updatedAt: z.iso.datetime(),
  }),
);
export type RuntimeBinding = z.infer<typeof RuntimeBinding>;

/** Most rooms one binding remembers; the least recently joined are dropped past it. */
export const MAX_BOUND_ROOMS = 500;

/** An access token of the MCP bridge's HTTP endpoint, as stored (the secret only as a hash). */
export const McpTokenRecord = named(
  'McpTokenRecord',
  z.object({
    id: McpTokenId,
    agent: AgentId.describe('The only agent this token acts as.'),
    label: z.string().max(100).default(''),
    secretSha256: z
      .string()
      .regex(/^[0-9a-f]{64}$/)
      .describe('SHA-256 of the token’s secret part, hex.'),
    createdBy: ParticipantId,
    createdAt: z.iso.datetime(),
    expiresAt: z.iso.datetime().optional(),
    revokedAt: z.iso.datetime().optional(),
  }),
);
export type McpTokenRecord = z.infer<typeof McpTokenRecord>;

/** A token as listed: the record without its hash. */
export const McpTokenInfo = named('McpTokenInfo', McpTokenRecord.omit({ secretSha256: true }));
export type McpTokenInfo = z.infer<typeof McpTokenInfo>;

/** Keys of the `parley_bindings` bucket. */
export const bindingKeys = {
  /**
   * A binding: `binding.<participant>.<runtime>.<base64url(externalId)>` (the external id is any
   * string; base64url keeps it one key token, reversibly).
   */
  binding: (participant: string, runtime: string, externalId: string) =>
    `binding.${participant}.${runtime}.${base64url(externalId)}`,
  /** Every binding of a participant (a watch filter). */
  bindingsOf: (participant: string) => `binding.${participant}.>`,
  /** An MCP access token: `token.<mtk_…>`. */
  token: (id: string) => `token.${id}`,
} as const;

function base64url(text: string): string {
  let binary = '';
  for (const b of new TextEncoder().encode(text)) binary += String.fromCharCode(b);
  return btoa(binary).replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
}

/** A binding key in a request. */
const BindingRef = () => z.object({ runtime: BindingRuntime, externalId: ExternalId });

/** The bindings API (served by the MCP service). The caller's own bindings only. */
export const bindingsApi = {
  bind: defineApi({
    service: 'bindings',
    method: 'bind',
    summary:
      'Create or refresh the caller’s binding for a runtime session and return it (with the rooms and positions a restarted session resumes from).',
    access: 'participant',
    request: named(
      'BindRequest',
      BindingRef().extend({
        session: z.string().max(200).optional().describe('The current transport session id, recorded.'),
      }),
    ),
    response: RuntimeBinding,
  }),
  advance: defineApi({
    service: 'bindings',
    method: 'advance',
    summary:
      'Record rooms the session took part in and the positions it returned; positions only move forward.',
    access: 'participant',
    request: named(
      'AdvanceBindingRequest',
      BindingRef().extend({
        positions: z
          .record(RoomId, z.int().min(0))
          .describe('Room → last returned room sequence (0 = took part, nothing returned yet).'),
      }),
    ),
    response: RuntimeBinding,
  }),
  list: defineApi({
    service: 'bindings',
    method: 'list',
    effect: 'read',
    summary: 'The caller’s bindings.',
    access: 'participant',
    request: named('ListBindingsRequest', z.object({})),
    response: named('ListBindingsResponse', z.object({ bindings: z.array(RuntimeBinding) })),
  }),
  unbind: defineApi({
    service: 'bindings',
    method: 'unbind',
    summary: 'Forget one of the caller’s bindings.',
    access: 'participant',
    request: named('UnbindRequest', BindingRef()),
    response: named('UnbindResponse', z.object({ removed: z.boolean() })),
  }),
} as const;

/** The MCP bridge's API: access tokens of its Streamable HTTP endpoint. */
export const mcpApi = {
  createToken: defineApi({
    service: 'mcp',
    method: 'createToken',
    summary:
      'Mint a bearer token that acts as one agent at the HTTP endpoint /mcp (the agent itself, its owner or an admin of its org). The token is returned once; only its hash is stored.',
    access: 'participant',
    request: named(
      'CreateMcpTokenRequest',
      z.object({
        agent: AgentId,
        label: z.string().trim().max(100).default(''),
        ttlDays: z.int().min(1).max(3650).optional().describe('Unset: the token does not expire.'),
      }),
    ),
    response: named('CreateMcpTokenResponse', z.object({ token: z.string(), info: McpTokenInfo })),
  }),
  listTokens: defineApi({
    service: 'mcp',
    method: 'listTokens',
    effect: 'read',
    summary: 'The tokens of an agent (the agent, its owner or an admin of its org); never their secrets.',
    access: 'participant',
    request: named('ListMcpTokensRequest', z.object({ agent: AgentId })),
    response: named('ListMcpTokensResponse', z.object({ tokens: z.array(McpTokenInfo) })),
  }),
  revokeToken: defineApi({
    service: 'mcp',
    method: 'revokeToken',
    summary: 'Revoke a token at once (the agent, its owner or an admin of its org).',
    access: 'participant',
    request: named('RevokeMcpTokenRequest', z.object({ id: McpTokenId })),
    response: named('RevokeMcpTokenResponse', z.object({ id: McpTokenId, revoked: z.boolean() })),
  }),
} as const;
