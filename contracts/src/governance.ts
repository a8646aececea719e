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
  TokenId,
  ToolCallId,
  UserId,
} from './ids.js';
import { IssuedCredentials, ParticipantStatus } from './registry.js';
import { named } from './registry-of-schemas.js';

/**
 * A scope: `tool:<name>` for a tool call, or any `domain:resource:action` string. A trailing whole
 * `*` segment (`hr:*`, `tool:hr.*`) or `*` alone is a pattern covering every scope with that prefix.
 */
export const Scope = named(
  'Scope',
  z
    .string()
    .min(1)
    .max(200)
    .regex(/^(\*|[a-z][a-z0-9_.:-]*?([.:]\*)?)$/, {
      message:
        'lowercase letters, digits, . _ : - (a trailing ":*" or ".*" segment, or "*" alone, is a pattern)',
    })
    .describe('A scope, e.g. hr:payroll:read or tool:hr.payroll.read; hr:* covers every hr: scope.'),
);
export type Scope = z.infer<typeof Scope>;

/** Error codes a refused decision carries. */
export const DecisionCode = named(
  'DecisionCode',
  z.enum([
    'PERMISSION_DENIED',
    'UNAUTHENTICATED',
    'EXPIRED',
    'REVOKED',
    'SUSPENDED',
    'BUDGET_EXCEEDED',
    'APPROVAL_REQUIRED',
  ]),
);

/** A decision with its reason. */
export const Decision = named(
  'Decision',
  z.object({
    allow: z.boolean(),
    reason: z.string(),
    decidedBy: z
      .string()
      .describe(
        'Which check or which link of the chain decided: a participant id (that link), `token`, `org <id>`, `budget`, or `policy`.',
      ),
    code: DecisionCode.optional().describe('On a refusal: the error code a caller should raise.'),
  }),
);
export type Decision = z.infer<typeof Decision>;

/** A usage report, sent to `parley.in.<id>.usage` (request/reply: the reply is {@link UsageReply}). */
export const UsageReport = named(
  'UsageReport',
  z.object({
    id: z
      .string()
      .min(1)
      .max(64)
      .regex(/^[A-Za-z0-9_-]+$/)
      .optional()
      .describe('Chosen by the reporter: a retry with the same id is counted once (2 minute window).'),
    model: z.string().min(1).max(100),
    inputTokens: z.int().min(0).max(100_000_000),
    outputTokens: z.int().min(0).max(100_000_000),
    costUsd: z.number().min(0).max(1_000_000).default(0),
    room: RoomId.optional(),
    message: MessageId.optional().describe('The message being handled when the usage happened.'),
    task: TaskId.optional().describe(
      'The task the usage was for (the reporter is its assignee or requester): added to its cost, checked against its budget.',
    ),
    binding: z
      .string()
      .regex(/^[A-Za-z0-9_:.-]{1,128}$/)
      .optional()
      .describe('The runtime binding (session, thread) that used it, e.g. langgraph:<thread_id>.'),
  }),
);
export type UsageReport = z.input<typeof UsageReport>;

/** The reply to a usage report. */
export const UsageReply = named(
  'UsageReply',
  z.object({
    counted: z.boolean().describe('False when this was a retry of a report already counted.'),
    exceeded: z
      .array(z.string())
      .default([])
      .describe('Budgets this report crossed, e.g. "agent tokensPerDay".'),
  }),
);
export type UsageReply = z.infer<typeof UsageReply>;

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
    cause: z
      .enum(['kill_switch', 'budget', 'revocation'])
      .optional()
      .describe('Why: budget suspensions are refused with BUDGET_EXCEEDED rather than SUSPENDED.'),
  }),
);
export type ParticipantPolicy = z.infer<typeof ParticipantPolicy>;

/** The reason every reader gives for a `participant.<id>` record that does not parse. */
export const MALFORMED_STANDING_REASON =
  'its standing record in parley_policy is malformed (governance must rewrite it: resume or revoke)';

/**
 * Reads a `participant.<id>` value of `parley_policy`, the same way in every service. A record that
 * is not a valid {@link ParticipantPolicy} (not JSON, a reply body, a missing status…) is an error,
 * and every reader treats it alike: the participant is **suspended** (`malformed: true`, the reason
 * says so) until governance writes a valid record. Never "suspended" in one reader and "active" in
 * another.
 */
export function readStanding(data: Uint8Array | string): { standing: ParticipantPolicy; malformed: boolean } {
  try {
    const text = typeof data === 'string' ? data : new TextDecoder().decode(data);
    const parsed = ParticipantPolicy.safeParse(JSON.parse(text));
    if (parsed.success) return { standing: parsed.data, malformed: false };
  } catch {
    // not JSON: malformed like any other bad record
  }
  return {
    standing: {
      status: 'suspended',
      reason: MALFORMED_STANDING_REASON,
      at: new Date(0).toISOString(),
      by: 'svc_governance' as ParticipantPolicy['by'],
    },
    malformed: true,
  };
}

/** Keys of the `parley_policy` bucket. */
export const policyKeys = {
  /** {@link ParticipantPolicy} of a participant. */
  participant: (participantId: string) => `participant.${participantId}`,
  /** The NATS user keys issued to a participant ({@link CredentialRecord}). */
  creds: (participantId: string) => `creds.${participantId}`,
  /** A revoked NATS user key (its value: {@link RevokedUserKey}); all of them make the account JWT's revocations. */
  revokedUser: (userPublicKey: string) => `revoked.${userPublicKey}`,
  /** Scopes a human holds ({@link Grants}). */
  grants: (userId: string) => `grants.${userId}`,
  /** An organisation's policy ({@link OrgPolicy}). */
  org: (orgId: string) => `org.${orgId}`,
  /** A budget ({@link Budget}) of an agent or of an owner (all its agents together). */
  budget: (kind: 'agent' | 'owner', id: string) => `budget.${kind}.${id}`,
  /** Everything about delegation (`delegation.>`): the rooms ingress watches it. */
  delegationAll: () => 'delegation.>',
  /** A public signing key of delegation tokens ({@link Jwk}); together they are the JWKS. */
  jwk: (kid: string) => `delegation.jwks.${kid}`,
  /** An issued token ({@link TokenRecord}). */
  token: (jti: string) => `delegation.token.${jti}`,
  /** A revoked token ({@link RevokedToken}): it and every token exchanged from it are refused. */
  revokedToken: (jti: string) => `delegation.revoked.jti.${jti}`,
  /** Every token a participant is principal or actor of, issued up to a time ({@link RevokedPrincipal}). */
  revokedPrincipal: (participantId: string) => `delegation.revoked.principal.${participantId}`,
} as const;

/** A public key that verifies delegation tokens (a JWK, Ed25519). */
export const Jwk = named(
  'Jwk',
  z.object({
    kty: z.literal('OKP'),
    crv: z.literal('Ed25519'),
    x: z.string().min(40).max(50),
    kid: z.string().min(1).max(100),
    alg: z.literal('EdDSA'),
    use: z.literal('sig'),
  }),
);
export type Jwk = z.infer<typeof Jwk>;

/** Scopes a human holds (`grants.<userId>`), set by an admin of the org. */
export const Grants = named(
  'Grants',
  z.object({
    participant: UserId,
    scopes: z.array(Scope).max(100),
    by: PrincipalId,
    at: z.iso.datetime(),
  }),
);
export type Grants = z.infer<typeof Grants>;

/** An organisation's delegation policy (`org.<orgId>`). */
/**
 * Who approves: `owner` = the acting agent's owner, `principal` = the human the work is done for
 * (the delegating human), `org_admin` = any admin of the principal's org, or one named person.
 */
export const Approver = named(
  'Approver',
  z
    .union([z.enum(['owner', 'principal', 'org_admin']), UserId])
    .describe('owner | principal | org_admin | a usr_ id'),
);
export type Approver = z.infer<typeof Approver>;

/** A rule of an org policy: calls within `scope` wait for `approver`'s yes. */
export const ApprovalRule = named(
  'ApprovalRule',
  z
    .object({ scope: Scope, approver: Approver })
    .describe('Tool calls within scope need approver’s yes first.'),
);
export type ApprovalRule = z.infer<typeof ApprovalRule>;

export const OrgPolicy = named(
  'OrgPolicy',
  z.object({
    org: OrgId,
    grants: z.array(Scope).max(100).describe('Scopes every human of the org holds.'),
    deny: z.array(Scope).max(100).describe('Scopes nobody may use on behalf of, or as, someone of this org.'),
    requireApproval: z
      .array(ApprovalRule)
      .max(50)
      .default([])
      .describe(
        'Tool calls within these scopes wait for a person’s yes (see docs/architecture.md, "Approval gates").',
      ),
    by: PrincipalId,
    at: z.iso.datetime(),
  }),
);
export type OrgPolicy = z.infer<typeof OrgPolicy>;

/** Budget limits; absent = no limit. Days and months are UTC. */
const BudgetLimits = {
  tokensPerDay: z.int().min(1).max(1e12).optional(),
  tokensPerMonth: z.int().min(1).max(1e13).optional(),
  costUsdPerDay: z.number().gt(0).max(1e9).optional(),
  costUsdPerMonth: z.number().gt(0).max(1e10).optional(),
};

/** A budget of an agent, or of an owner over all its agents (`budget.<kind>.<id>`). */
export const Budget = named(
  'Budget',
  z.object({
    kind: z.enum(['agent', 'owner']),
    id: ParticipantId,
    ...BudgetLimits,
    onExceed: z
      .enum(['suspend', 'pause_room'])
      .describe(
        'suspend = the agent (every agent of the owner) is suspended; pause_room = the room of the report is paused.',
      ),
    by: PrincipalId,
    at: z.iso.datetime(),
  }),
);
export type Budget = z.infer<typeof Budget>;

/** One limit of a budget against what was spent in its period (the current UTC day or month). */
export const BudgetLimitStatus = named(
  'BudgetLimitStatus',
  z.object({
    limit: z.enum(['tokensPerDay', 'tokensPerMonth', 'costUsdPerDay', 'costUsdPerMonth']),
    value: z.number().describe('The limit.'),
    used: z.number().describe('Spent in the current period: tokens (in + out) or USD.'),
    ratio: z.number().min(0).describe('used / value: 1 or more means the budget is exceeded.'),
    period: z.string().describe('The UTC day (YYYY-MM-DD) or month (YYYY-MM) it counts.'),
  }),
);
export type BudgetLimitStatus = z.infer<typeof BudgetLimitStatus>;

/** A budget and how close each of its limits is. */
export const BudgetStatus = named(
  'BudgetStatus',
  z.object({ budget: Budget, limits: z.array(BudgetLimitStatus), exceeded: z.boolean() }),
);
export type BudgetStatus = z.infer<typeof BudgetStatus>;

/** An issued delegation token (`delegation.token.<jti>`): who may revoke it, and the audit chain. */
export const TokenRecord = named(
  'TokenRecord',
  z.object({
    jti: TokenId,
    principal: UserId,
    org: OrgId,
    chain: z.array(ParticipantId).min(1),
    scope: z.array(Scope),
    exp: z.int(),
    parent: TokenId.optional(),
    issuedBy: PrincipalId,
    at: z.iso.datetime(),
  }),
);
export type TokenRecord = z.infer<typeof TokenRecord>;

/** A revoked token (`delegation.revoked.jti.<jti>`). */
export const RevokedToken = named(
  'RevokedToken',
  z.object({
    jti: TokenId,
    by: PrincipalId,
    reason: z.string().max(500),
    at: z.iso.datetime(),
    exp: z.int().describe('When the token would have expired: the entry is useless after.'),
  }),
);
export type RevokedToken = z.infer<typeof RevokedToken>;

/** Revocation of every token a participant takes part in (`delegation.revoked.principal.<id>`). */
export const RevokedPrincipal = named(
  'RevokedPrincipal',
  z.object({
    participant: ParticipantId,
    before: z.int().describe('Unix seconds: tokens issued at or before this are refused.'),
    by: PrincipalId,
    reason: z.string().max(500),
    at: z.iso.datetime(),
  }),
);
export type RevokedPrincipal = z.infer<typeof RevokedPrincipal>;

/** One hop of an audit chain, newest first. */
export const AuditHop = named(
  'AuditHop',
  z.object({
    kind: z.enum(['tool_call', 'message']),
    id: z.string().describe('tc_… or msg_…'),
    actor: PrincipalId.optional().describe(
      'Who acted: the sender of the message, the caller of the tool. Absent on a redacted hop.',
    ),
    redacted: z
      .literal(true)
      .optional()
      .describe(
        'The hop is in a room the caller may not read: only that it exists (id, kind, time) is shown.',
      ),
    linkUnverified: z
      .literal(true)
      .optional()
      .describe(
        'Its `causedBy` (a tool call: its message) names a message its actor could not read: a caller-asserted link that was not followed.',
      ),
    onBehalfOf: z
      .array(PrincipalId)
      .default([])
      .describe('The verified delegation: the principal first, then each actor to the current one.'),
    decision: Decision.optional(),
    room: RoomId.optional(),
    tool: z.string().optional(),
    status: z.string().optional().describe('Tool calls: ok, error or denied.'),
    tokenId: z.string().optional(),
    scope: z.array(z.string()).optional(),
    causedBy: z.string().optional(),
    hop: z.int().optional(),
    traceId: z.string().optional(),
    at: z.iso.datetime(),
    text: z.string().optional().describe('The start of a message’s text.'),
  }),
);
export type AuditHop = z.infer<typeof AuditHop>;

/** One row of a usage aggregate. */
export const UsageRow = named(
  'UsageRow',
  z.object({
    key: z.string().describe('The agent, owner, org, room (or `-` for none) or day.'),
    inputTokens: z.int(),
    outputTokens: z.int(),
    costUsd: z.number(),
    reports: z.int(),
  }),
);
export type UsageRow = z.infer<typeof UsageRow>;

const Reason = z.string().trim().min(1).max(500);

/** The state a kill-switch call left an agent in. */
const StandingResponse = (name: string) =>
  named(
    name,
    z.object({ agent: AgentId, status: ParticipantStatus, reason: z.string(), at: z.iso.datetime() }),
  );

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
        expiresAt: z.iso
          .datetime()
          .optional()
          .describe('Short-lived session credentials (the gateway’s) expire; the record drops them after.'),
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
  sessionCredentials: defineApi({
    service: 'governance',
    method: 'sessionCredentials',
    summary:
      'The gateway only: short-lived NATS credentials (the participant permission template, an expiry of at most an hour) for a participant the gateway authenticated, so each HTTP request goes out over NATS as that participant. Refused with REVOKED for a revoked participant; revoking the participant revokes these too.',
    access: 'service',
    request: named(
      'SessionCredentialsRequest',
      z.object({
        participant: ParticipantId,
        ttlSeconds: z.int().min(60).max(3600).default(900),
      }),
    ),
    response: named(
      'SessionCredentials',
      z.object({ creds: z.string(), userPublicKey: z.string(), expiresAt: z.iso.datetime() }),
    ),
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
  mintA2aCallToken: defineApi({
    service: 'governance',
    method: 'mintA2aCallToken',
    summary:
      'The gateway only: a short-lived signed token for one outbound A2A call of an imported agent (claims: A2aCallClaims; aud = the callee’s card URL). The chain is governance’s own record of the message’s delegation token (`tokenId`) with the A2A agent as the next actor, or the sender alone; refused when the token is revoked or expired, or its current actor is not the sender.',
    access: 'service',
    request: named(
      'MintA2aCallTokenRequest',
      z.object({
        actor: AgentId.describe('The imported A2A agent making the call.'),
        sender: ParticipantId.describe('Who sent the room message.'),
        audience: z.url({ protocol: /^https?$/ }).describe('The callee’s agent card URL.'),
        room: RoomId,
        messageId: MessageId,
        taskId: z.string().min(1).max(200).optional(),
        tokenId: TokenId.optional().describe('jti of the delegation the message carries (its onBehalfOf).'),
        ttlSeconds: z.int().min(10).max(300).default(120),
      }),
    ),
    response: named(
      'A2aCallToken',
      z.object({
        token: z.string(),
        jti: TokenId,
        expiresAt: z.iso.datetime(),
        principal: ParticipantId,
        chain: z.array(ParticipantId).describe('Actors, first to current (the A2A agent).'),
      }),
    ),
  }),
  jwks: defineApi({
    service: 'governance',
    method: 'jwks',
    effect: 'read',
    summary:
      'The public keys that verify delegation tokens (a JWKS). The rooms ingress reads the same keys from parley_policy.',
    access: 'any',
    request: named('JwksRequest', z.object({})),
    response: named('Jwks', z.object({ keys: z.array(Jwk) })),
  }),
  issueToken: defineApi({
    service: 'governance',
    method: 'issueToken',
    summary:
      'A human (or an admin of their org on their behalf) delegates a task to an agent: a token with sub = the human, act = the agent. Every scope must be one the human holds; scopes the agent’s card does not list are dropped.',
    access: 'human',
    request: named(
      'IssueTokenRequest',
      z.object({
        onBehalfOf: UserId.optional().describe(
          'Admins only: the human the token speaks for. @default the caller',
        ),
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
      z.object({
        token: z.string(),
        jti: TokenId,
        expiresAt: z.iso.datetime(),
        scope: z.array(Scope),
        dropped: z.array(Scope).describe('Requested scopes the actor may not hold.'),
        chain: z.array(ParticipantId).describe('Actors, first to current.'),
      }),
    ),
  }),
  exchangeToken: defineApi({
    service: 'governance',
    method: 'exchangeToken',
    summary:
      'RFC 8693 exchange: the current actor passes its token to another agent, which must be a contact or a fellow member of `room`. Scope = requested ∩ current ∩ what the new actor may hold; exp never grows; the chain depth is capped.',
    access: 'participant',
    request: named(
      'ExchangeTokenRequest',
      z.object({
        token: z.string().min(1).max(8192),
        actor: AgentId.describe('The agent that will act next.'),
        scope: z.array(Scope).min(1).max(50).optional().describe('@default the whole current scope'),
        ttlSeconds: z
          .int()
          .min(10)
          .max(7 * 24 * 3600)
          .optional()
          .describe('Shorter than what is left is fine; longer is refused. @default what is left'),
        room: RoomId.optional().describe('A room both are members of (when they are not contacts).'),
      }),
    ),
    response: named(
      'ExchangedTokenResponse',
      z.object({
        token: z.string(),
        jti: TokenId,
        expiresAt: z.iso.datetime(),
        scope: z.array(Scope),
        dropped: z.array(Scope).describe('Scopes of the current token the new actor may not hold.'),
        chain: z.array(ParticipantId).describe('Actors, first to current.'),
      }),
    ),
  }),
  revokeToken: defineApi({
    service: 'governance',
    method: 'revokeToken',
    summary:
      'Revoke a token (and every token exchanged from it) by jti — its principal, an actor of its chain or an admin — or every token a participant takes part in (itself, its owner, an admin). Effective at every ingress and in authorize at once.',
    access: 'participant',
    request: named(
      'RevokeTokenRequest',
      z.union([
        z.object({ jti: TokenId, reason: Reason.default('revoked') }).strict(),
        z.object({ principal: ParticipantId, reason: Reason.default('revoked') }).strict(),
      ]),
    ),
    response: named(
      'RevokeTokenResponse',
      z.object({ revoked: z.enum(['token', 'principal']), id: z.string(), at: z.iso.datetime() }),
    ),
  }),
  authorize: defineApi({
    service: 'governance',
    method: 'authorize',
    effect: 'read',
    summary:
      'May the caller perform `action` (under `token`, or on its own authority)? Allowed only if the action is in the token’s scope, the caller is its current actor and is itself granted the action, nobody in the chain is suspended or revoked, and org policy allows it. Recorded in the audit log.',
    access: 'participant',
    request: named(
      'AuthorizeRequest',
      z.object({
        token: z.string().min(1).max(8192).optional(),
        action: Scope.describe('e.g. hr:payroll:read'),
        tool: z.string().min(1).max(200).optional().describe('The tool about to run, for the audit record.'),
        toolCall: ToolCallId.optional(),
        message: MessageId.optional().describe('The message being handled.'),
        causedBy: MessageId.optional(),
      }),
    ),
    response: named(
      'AuthorizeResponse',
      Decision.extend({
        principal: ParticipantId.optional().describe('Whose authority the caller acts under.'),
        chain: z.array(ParticipantId).default([]).describe('Actors, first to current.'),
        ttlMs: z.int().min(0).describe('How long the caller may reuse an allow (0 = do not cache).'),
        approval: ApprovalRule.optional().describe(
          'With code APPROVAL_REQUIRED: the rule that holds the call (ask with requestApproval).',
        ),
      }),
    ),
  }),
  recordToolCall: defineApi({
    service: 'governance',
    method: 'recordToolCall',
    summary: 'Record a tool call: arguments digest, outcome, duration (the SDK does it after every call).',
    access: 'participant',
    request: named(
      'RecordToolCallRequest',
      z.object({
        id: ToolCallId,
        tool: z.string().min(1).max(200),
        action: Scope.optional(),
        argsDigest: z.string().regex(/^sha256=[0-9a-f]{64}$/),
        status: z.enum(['ok', 'error', 'denied']),
        error: z.string().max(200).optional().describe('The error code or class of a failed call.'),
        durationMs: z
          .number()
          .min(0)
          .max(7 * 24 * 3600 * 1000),
        token: z.string().min(1).max(8192).optional(),
        message: MessageId.optional(),
        causedBy: MessageId.optional(),
      }),
    ),
    response: named('RecordToolCallResponse', z.object({ recorded: z.literal(true) })),
  }),
  suspend: defineApi({
    service: 'governance',
    method: 'suspend',
    summary:
      'Kill switch (its owner or an admin): the agent’s sends are refused on every ingress within a second, its tool calls are denied, and its owner is told.',
    access: 'human',
    request: named('SuspendRequest', z.object({ agent: AgentId, reason: Reason })),
    response: StandingResponse('SuspendResponse'),
  }),
  resume: defineApi({
    service: 'governance',
    method: 'resume',
    summary: 'Lift a suspension (its owner or an admin). A revoked agent stays revoked.',
    access: 'human',
    request: named('ResumeRequest', z.object({ agent: AgentId, reason: Reason.default('resumed') })),
    response: StandingResponse('ResumeResponse'),
  }),
  setGrants: defineApi({
    service: 'governance',
    method: 'setGrants',
    summary: 'Set the scopes a human holds (an admin of the human’s org). Replaces the previous list.',
    access: 'human',
    request: named('SetGrantsRequest', z.object({ participant: UserId, scopes: z.array(Scope).max(100) })),
    response: Grants,
  }),
  setOrgPolicy: defineApi({
    service: 'governance',
    method: 'setOrgPolicy',
    summary:
      'Set an organisation’s delegation policy (an admin of the org): scopes every member holds, scopes nobody may use.',
    access: 'human',
    request: named(
      'SetOrgPolicyRequest',
      z.object({
        org: OrgId,
        grants: z.array(Scope).max(100).default([]),
        deny: z.array(Scope).max(100).default([]),
        requireApproval: z.array(ApprovalRule).max(50).default([]),
      }),
    ),
    response: OrgPolicy,
  }),
  setBudget: defineApi({
    service: 'governance',
    method: 'setBudget',
    summary:
      'Set the budget of an agent (its owner or an admin) or of an owner over all its agents (an admin). Crossing it suspends the agent (or pauses the room) and notifies the owner.',
    access: 'human',
    request: named(
      'SetBudgetRequest',
      z
        .object({
          agent: AgentId.optional(),
          owner: UserId.optional(),
          ...BudgetLimits,
          onExceed: z.enum(['suspend', 'pause_room']).default('suspend'),
        })
        .refine((b) => (b.agent === undefined) !== (b.owner === undefined), {
          message: 'give exactly one of agent or owner',
        }),
    ),
    response: Budget,
  }),
  budgets: defineApi({
    service: 'governance',
    method: 'budgets',
    effect: 'read',
    summary:
      'The budgets the caller may see — of its own agents and of itself; an admin: of its org’s agents and people; the superadmin: all — each with what was spent of every limit in the current UTC day and month.',
    access: 'human',
    request: named(
      'BudgetsRequest',
      z.object({
        agent: AgentId.optional().describe('Only this agent’s budget.'),
        owner: UserId.optional().describe('Only budgets of this owner: its own and its agents’.'),
      }),
    ),
    response: named('BudgetsResponse', z.object({ budgets: z.array(BudgetStatus) })),
  }),
  listGrants: defineApi({
    service: 'governance',
    method: 'listGrants',
    effect: 'read',
    summary:
      'An organisation’s delegation policy and the scopes each of its people was granted (an admin of the org, or the superadmin).',
    access: 'human',
    request: named(
      'ListGrantsRequest',
      z.object({ org: OrgId.optional().describe('Unset: the caller’s organisation.') }),
    ),
    response: named(
      'ListGrantsResponse',
      z.object({ org: OrgId, policy: OrgPolicy.optional(), grants: z.array(Grants) }),
    ),
  }),
  usage: defineApi({
    service: 'governance',
    method: 'usage',
    effect: 'read',
    summary:
      'Usage the caller may see (its own, its agents’, its org’s for an admin), summed by agent, owner, org, room, day, task or runtime binding (only reports that named one), from `since` to `until` (UTC days).',
    access: 'participant',
    request: named(
      'UsageQueryRequest',
      z.object({
        by: z.enum(['agent', 'owner', 'org', 'room', 'day', 'task', 'binding']).default('agent'),
        since: z.iso.date().optional().describe('@default today (UTC)'),
        until: z.iso.date().optional().describe('@default today (UTC)'),
        org: OrgId.optional().describe('Only this org.'),
        agent: AgentId.optional().describe('Only this agent.'),
      }),
    ),
    response: named(
      'UsageQueryResponse',
      z.object({
        by: z.enum(['agent', 'owner', 'org', 'room', 'day', 'task', 'binding']),
        since: z.iso.date(),
        until: z.iso.date(),
        rows: z.array(UsageRow),
        total: UsageRow,
      }),
    ),
  }),
  auditChain: defineApi({
    service: 'governance',
    method: 'auditChain',
    effect: 'read',
    summary:
      'Walk a message or tool call back to the human who started it: each hop with actor, on-behalf-of chain, decision and reason (participants of the chain, admins and services).',
    access: 'participant',
    request: named('AuditChainRequest', z.object({ of: z.union([MessageId, ToolCallId]) })),
    response: named(
      'AuditChainResponse',
      z.object({
        hops: z.array(AuditHop).describe('Newest first: the hop asked about, then what caused it.'),
        origin: PrincipalId.optional().describe(
          'The human who started it (the first sender or the principal).',
        ),
        complete: z.boolean().describe('False when a hop could not be found (e.g. past retention).'),
      }),
    ),
  }),
} as const;
