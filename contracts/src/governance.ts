import * as z from 'zod';
import { defineApi } from './api.js';
import {
  AgentId,
  MessageId,
  OrgId,
  ParticipantId,
  PrincipalId,
  RoomId,
  TaskId,
  ToolCallId,
  UserId,
} from './ids.js';
import { IssuedCredentials, ParticipantStatus } from './registry.js';
import { named } from './registry-of-schemas.js';

/** A scope: `tool:<name>` for a tool call, or any `domain:resource:action` string. */
export const Scope = named(
  'Scope',
  z
    .string()
    .min(1)
    .max(200)
    .regex(/^[a-z][a-z0-9_.:*-]*$/, { message: 'lowercase, digits, . _ : * -' }),
);

/** A decision with its reason. */
export const Decision = named(
  'Decision',
  z.object({
    allow: z.boolean(),
    reason: z.string(),
    decidedBy: z.string().describe('Which check or which link of the chain decided.'),
  }),
);
export type Decision = z.infer<typeof Decision>;

/** A usage report, sent to `parley.in.<id>.usage`. */
export const UsageReport = named(
  'UsageReport',
  z.object({
    model: z.string().min(1).max(100),
    inputTokens: z.int().min(0).max(100_000_000),
    outputTokens: z.int().min(0).max(100_000_000),
    costUsd: z.number().min(0).max(1_000_000).default(0),
    room: RoomId.optional(),
    message: MessageId.optional(),
    task: TaskId.optional(),
  }),
);
export type UsageReport = z.input<typeof UsageReport>;

/**
 * A participant's standing, in KV bucket `parley_policy` under `participant.<id>` (absent = active).
 * Written by governance; every rooms ingress watches it and refuses a suspended or revoked sender.
 */
export const ParticipantPolicy = named(
  'ParticipantPolicy',
  z.object({
    status: ParticipantStatus,
    reason: z.string().max(500),
    at: z.iso.datetime(),
    by: PrincipalId.describe('Who decided.'),
  }),
);
export type ParticipantPolicy = z.infer<typeof ParticipantPolicy>;

/** Keys of the `parley_policy` bucket. */
export const policyKeys = {
  /** {@link ParticipantPolicy} of a participant. */
  participant: (participantId: string) => `participant.${participantId}`,
  /** The NATS user keys issued to a participant ({@link CredentialRecord}). */
  creds: (participantId: string) => `creds.${participantId}`,
  /** A revoked NATS user key (its value: {@link RevokedUserKey}); all of them make the account JWT's revocations. */
  revokedUser: (userPublicKey: string) => `revoked.${userPublicKey}`,
} as const;

/** The NATS user keys issued to one participant (`parley_policy`, `creds.<id>`). */
export const CredentialRecord = named(
  'CredentialRecord',
  z.object({
    participant: ParticipantId,
    keys: z.array(
      z.object({
        userPublicKey: z.string(),
        issuedAt: z.iso.datetime(),
        revokedAt: z.iso.datetime().optional(),
      }),
    ),
  }),
);
export type CredentialRecord = z.infer<typeof CredentialRecord>;

/** A revoked NATS user key (`parley_policy`, `revoked.<userPublicKey>`). */
export const RevokedUserKey = named(
  'RevokedUserKey',
  z.object({
    participant: ParticipantId,
    at: z.int().min(0).describe('Unix seconds: user JWTs of this key issued at or before it are refused.'),
    reason: z.enum(['rotated', 'revoked']),
  }),
);
export type RevokedUserKey = z.infer<typeof RevokedUserKey>;

/** The governance service's API. */
export const governanceApi = {
  issueCredentials: defineApi({
    service: 'governance',
    method: 'issueCredentials',
    summary:
      'Mint NATS user credentials for a participant (services only); refused with REVOKED for a revoked participant.',
    access: 'service',
    request: named('IssueCredentialsRequest', z.object({ participant: ParticipantId })),
    response: IssuedCredentials,
  }),
  rotateCredentials: defineApi({
    service: 'governance',
    method: 'rotateCredentials',
    summary:
      'Issue new credentials for a participant (an agent’s owner, an admin of its org, a human for itself, or a service); every older credential stops working and its connections are closed.',
    access: 'human',
    request: named('RotateCredentialsRequest', z.object({ participant: ParticipantId })),
    response: IssuedCredentials,
  }),
  revokeCredentials: defineApi({
    service: 'governance',
    method: 'revokeCredentials',
    summary:
      'Revoke every credential of a participant for good (an agent’s owner, an admin of its org, or a service); its connections are closed and no new credentials are issued.',
    access: 'human',
    request: named(
      'RevokeCredentialsRequest',
      z.object({ participant: ParticipantId, reason: z.string().min(1).max(500).default('revoked') }),
    ),
    response: named('RevokeCredentialsResponse', z.object({ revoked: z.int().min(0) })),
  }),
  issueToken: defineApi({
    service: 'governance',
    method: 'issueToken',
    summary: 'A human (or an admin on their behalf) delegates a scoped task to an agent.',
    access: 'human',
    request: named(
      'IssueTokenRequest',
      z.object({
        onBehalfOf: UserId.optional().describe('Admins only: the human the token speaks for.'),
        actor: AgentId,
        scope: z.array(Scope).min(1).max(50),
        ttlSeconds: z
          .int()
          .min(10)
          .max(7 * 24 * 3600)
          .default(3600),
        task: TaskId.optional(),
      }),
    ),
    response: named(
      'DelegationTokenResponse',
      z.object({ token: z.string(), expiresAt: z.iso.datetime(), jti: z.string() }),
    ),
  }),
  exchangeToken: defineApi({
    service: 'governance',
    method: 'exchangeToken',
    summary: 'The current actor passes a token to another agent (RFC 8693): scope narrows, exp never grows.',
    access: 'participant',
    request: named(
      'ExchangeTokenRequest',
      z.object({
        token: z.string().max(8192),
        actor: AgentId,
        scope: z.array(Scope).max(50).optional().describe('Defaults to the whole current scope.'),
        room: RoomId.optional().describe('Where the two share a room, if they are not contacts.'),
      }),
    ),
    response: named(
      'ExchangedTokenResponse',
      z.object({ token: z.string(), expiresAt: z.iso.datetime(), jti: z.string(), scope: z.array(Scope) }),
    ),
  }),
  revokeToken: defineApi({
    service: 'governance',
    method: 'revokeToken',
    summary: 'Revoke a token by jti, or every token of a principal.',
    access: 'participant',
    request: named(
      'RevokeTokenRequest',
      z.union([z.object({ jti: z.string() }), z.object({ principal: ParticipantId })]),
    ),
    response: named('RevokeTokenResponse', z.object({ ok: z.literal(true) })),
  }),
  authorize: defineApi({
    service: 'governance',
    method: 'authorize',
    summary: 'May the caller perform `action` under `token`? Recorded in the audit log.',
    access: 'participant',
    request: named(
      'AuthorizeRequest',
      z.object({
        token: z.string().max(8192).optional(),
        action: Scope,
        message: MessageId.optional(),
        toolCall: ToolCallId.optional(),
      }),
    ),
    response: Decision,
  }),
  recordToolCall: defineApi({
    service: 'governance',
    method: 'recordToolCall',
    summary: 'Record the outcome of an authorized tool call.',
    access: 'participant',
    request: named(
      'RecordToolCallRequest',
      z.object({
        id: ToolCallId,
        tool: z.string().min(1).max(200),
        argsDigest: z.string().max(128),
        status: z.enum(['ok', 'error', 'denied']),
        durationMs: z.number().min(0),
        message: MessageId.optional(),
        causedBy: MessageId.optional(),
        onBehalfOf: ParticipantId.optional(),
      }),
    ),
    response: named('RecordToolCallResponse', z.object({ ok: z.literal(true) })),
  }),
  suspend: defineApi({
    service: 'governance',
    method: 'suspend',
    summary: 'Kill switch: suspend an agent (its owner or an admin). Takes effect on every ingress at once.',
    access: 'human',
    request: named('SuspendRequest', z.object({ agent: AgentId, reason: z.string().min(1).max(500) })),
    response: named('SuspendResponse', z.object({ agent: AgentId, suspended: z.boolean() })),
  }),
  resume: defineApi({
    service: 'governance',
    method: 'resume',
    summary: 'Lift a suspension.',
    access: 'human',
    request: named('ResumeRequest', z.object({ agent: AgentId, reason: z.string().max(500).optional() })),
    response: named('ResumeResponse', z.object({ agent: AgentId, suspended: z.boolean() })),
  }),
  usage: defineApi({
    service: 'governance',
    method: 'usage',
    summary: 'Usage aggregates the caller may see, by agent, owner, org, room or day.',
    access: 'participant',
    request: named(
      'UsageQueryRequest',
      z.object({
        by: z.enum(['agent', 'owner', 'org', 'room', 'day']).default('agent'),
        since: z.iso.date().optional(),
        org: OrgId.optional(),
      }),
    ),
    response: named(
      'UsageQueryResponse',
      z.object({
        rows: z.array(
          z.object({
            key: z.string(),
            inputTokens: z.int(),
            outputTokens: z.int(),
            costUsd: z.number(),
            reports: z.int(),
          }),
        ),
      }),
    ),
  }),
  auditChain: defineApi({
    service: 'governance',
    method: 'auditChain',
    summary: 'Walk a message or tool call back to the human who started it.',
    access: 'participant',
    request: named('AuditChainRequest', z.object({ of: z.union([MessageId, ToolCallId]) })),
    response: named(
      'AuditChainResponse',
      z.object({
        hops: z.array(
          z.object({
            kind: z.string(),
            id: z.string(),
            actor: PrincipalId,
            onBehalfOf: z.array(PrincipalId).default([]),
            decision: Decision.optional(),
            traceId: z.string().optional(),
            at: z.iso.datetime(),
          }),
        ),
      }),
    ),
  }),
} as const;
