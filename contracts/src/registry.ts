import * as z from 'zod';
import { defineApi } from './api.js';
import { AgentId, OrgId, ParticipantId, PrincipalId, UserId } from './ids.js';
import { limits } from './limits.js';
import { named } from './registry-of-schemas.js';

const Name = z
  .string()
  .trim()
  .min(1)
  .max(100)
  .regex(/^[\p{L}\p{N}][\p{L}\p{N} ._-]*$/u, {
    message: 'letters, digits, spaces, . _ - (starting with a letter or digit)',
  });

/** An organisation. */
export const Org = named('Org', z.object({ id: OrgId, name: z.string(), createdAt: z.iso.datetime() }));
export type Org = z.infer<typeof Org>;

/** A human's role in its org. */
export const HumanRole = named('HumanRole', z.enum(['admin', 'member']));

/** A human participant. */
export const Human = named(
  'Human',
  z.object({
    id: UserId,
    org: OrgId,
    name: z.string(),
    email: z.email().optional(),
    role: HumanRole,
    superadmin: z.boolean().default(false).describe('May create orgs (the local admin).'),
    createdAt: z.iso.datetime(),
  }),
);
export type Human = z.infer<typeof Human>;

/** The runtime an agent runs in. */
export const RuntimeKind = named(
  'RuntimeKind',
  z.enum(['claude-code', 'codex', 'cursor', 'langgraph', 'bridge', 'a2a', 'custom']),
);
export type RuntimeKind = z.infer<typeof RuntimeKind>;

/** Who may see an agent in discovery and fetch its card. */
export const Visibility = named(
  'Visibility',
  z.enum(['private', 'org', 'public']).describe('private = its owner only'),
);
export type Visibility = z.infer<typeof Visibility>;

/** A skill on an agent card (as in A2A). */
export const AgentSkill = named(
  'AgentSkill',
  z.object({
    id: z
      .string()
      .min(1)
      .max(100)
      .regex(/^[a-z0-9][a-z0-9._-]*$/, { message: 'lowercase letters, digits, . _ -' }),
    name: z.string().min(1).max(200),
    description: z.string().max(2000).default(''),
    tags: z.array(z.string().min(1).max(50)).max(20).default([]),
    examples: z.array(z.string().max(500)).max(10).default([]),
  }),
);
export type AgentSkill = z.infer<typeof AgentSkill>;

/**
 * An agent card: compatible with the A2A agent card (name, description, version, provider, skills,
 * capabilities, input/output modes) plus Parley's fields (runtime, tools, scopes, visibility).
 */
export const AgentCard = named(
  'AgentCard',
  z.object({
    name: Name,
    description: z.string().max(2000).default(''),
    version: z.string().max(50).default('0.1.0'),
    provider: z.object({ organization: z.string().max(200), url: z.url().optional() }).optional(),
    skills: z.array(AgentSkill).max(50).default([]),
    capabilities: z
      .object({
        streaming: z.boolean().default(false),
        pushNotifications: z.boolean().default(false),
      })
      .default({ streaming: false, pushNotifications: false }),
    defaultInputModes: z.array(z.string().max(100)).max(20).default(['text/plain']),
    defaultOutputModes: z.array(z.string().max(100)).max(20).default(['text/plain']),
    runtime: RuntimeKind.default('custom'),
    tools: z.array(z.string().min(1).max(200)).max(100).default([]).describe('Tools it declares.'),
    scopes: z
      .array(z.string().min(1).max(200))
      .max(100)
      .default([])
      .describe('Scopes it asks to hold, e.g. tool:hr.payroll.read'),
    visibility: Visibility.default('org'),
  }),
);
export type AgentCard = z.infer<typeof AgentCard>;
export type AgentCardInput = z.input<typeof AgentCard>;

/** Whether a participant may act: `parley_policy` key `participant.<id>` (absent = active). */
export const ParticipantStatus = named('ParticipantStatus', z.enum(['active', 'suspended', 'revoked']));
export type ParticipantStatus = z.infer<typeof ParticipantStatus>;

/** An agent as the registry keeps it. */
export const Agent = named(
  'Agent',
  z.object({
    id: AgentId,
    owner: UserId,
    org: OrgId,
    card: AgentCard,
    revision: z
      .int()
      .min(1)
      .describe('Compare-and-set revision for updates (the KV revision of the record).'),
    status: ParticipantStatus.describe('From governance (parley_policy); revoked agents cannot connect.'),
    createdAt: z.iso.datetime(),
    updatedAt: z.iso.datetime(),
  }),
);
export type Agent = z.infer<typeof Agent>;

/** Presence state. */
export const PresenceState = named('PresenceState', z.enum(['online', 'offline', 'busy', 'needs_input']));
export type PresenceState = z.infer<typeof PresenceState>;

/**
 * A heartbeat, sent to `parley.in.<id>.presence` (the SDK sends one every 10 s while connected and
 * one at each change; `offline` when it closes). A participant whose heartbeats stop turns
 * `offline` after the presence TTL.
 */
export const PresenceHeartbeat = named(
  'PresenceHeartbeat',
  z.object({
    state: PresenceState.default('online'),
    activity: z.string().max(200).optional().describe('e.g. "reviewing PR 42"'),
  }),
);
export type PresenceHeartbeat = z.input<typeof PresenceHeartbeat>;

/** Presence as the registry reports it. */
export const Presence = named(
  'Presence',
  z.object({
    state: PresenceState,
    activity: z.string().optional(),
    lastSeen: z.iso.datetime().optional(),
  }),
);
export type Presence = z.infer<typeof Presence>;

/** Credentials returned once, at creation or rotation. */
export const IssuedCredentials = named(
  'IssuedCredentials',
  z.object({
    creds: z.string().describe('A NATS creds file (user JWT + seed). Store it; it is shown once.'),
    userPublicKey: z.string(),
    expiresAt: z.iso.datetime().optional(),
  }),
);
export type IssuedCredentials = z.infer<typeof IssuedCredentials>;

/** `registry.whoami` response. */
export const WhoAmI = named(
  'WhoAmI',
  z.object({
    id: PrincipalId,
    kind: z.enum(['human', 'agent', 'service']),
    name: z.string().optional(),
    org: OrgId.optional(),
    owner: UserId.optional(),
    role: HumanRole.optional(),
    superadmin: z.boolean().optional(),
  }),
);
export type WhoAmI = z.infer<typeof WhoAmI>;

/** What the registry knows of a participant, for other services' authorization checks. */
export const ParticipantInfo = named(
  'ParticipantInfo',
  z.object({
    id: ParticipantId,
    kind: z.enum(['human', 'agent']),
    name: z.string(),
    org: OrgId,
    owner: UserId.optional().describe('Agents: the human who owns it.'),
    role: HumanRole.optional().describe('Humans: their role in the org.'),
  }),
);
export type ParticipantInfo = z.infer<typeof ParticipantInfo>;

/** An entry of a discovery result or inventory listing. */
export const AgentListing = named('AgentListing', z.object({ agent: Agent, presence: Presence }));
export type AgentListing = z.infer<typeof AgentListing>;

const Cursor = z.string().max(200);
const Page = {
  limit: z.int().min(1).max(limits.maxPageSize).default(20),
  cursor: Cursor.optional(),
};

/** The registry's API. */
export const registryApi = {
  whoami: defineApi({
    service: 'registry',
    method: 'whoami',
    effect: 'read',
    summary: 'Who the caller is, as the registry knows it.',
    access: 'any',
    request: named('WhoAmIRequest', z.object({})),
    response: WhoAmI,
  }),
  createOrg: defineApi({
    service: 'registry',
    method: 'createOrg',
    summary: 'Create an organisation (superadmin only).',
    access: 'admin',
    request: named('CreateOrgRequest', z.object({ name: Name })),
    response: Org,
  }),
  listOrgs: defineApi({
    service: 'registry',
    method: 'listOrgs',
    effect: 'read',
    summary: 'Organisations the caller can see.',
    access: 'human',
    request: named('ListOrgsRequest', z.object({})),
    response: named('ListOrgsResponse', z.object({ orgs: z.array(Org) })),
  }),
  createUser: defineApi({
    service: 'registry',
    method: 'createUser',
    summary: 'Create a human in an org (an admin of that org) and return its credentials once.',
    access: 'admin',
    request: named(
      'CreateUserRequest',
      z.object({
        name: Name,
        org: OrgId,
        role: HumanRole.default('member'),
        email: z.email().optional(),
      }),
    ),
    response: named('CreateUserResponse', z.object({ user: Human, credentials: IssuedCredentials })),
  }),
  listUsers: defineApi({
    service: 'registry',
    method: 'listUsers',
    summary:
      'The people of an organisation the caller can see (its own org; the superadmin any), sorted by name.',
    access: 'human',
    request: named(
      'ListUsersRequest',
      z.object({ org: OrgId.optional().describe('Unset: the caller’s organisation.') }),
    ),
    response: named('ListUsersResponse', z.object({ users: z.array(Human) })),
  }),
  getUser: defineApi({
    service: 'registry',
    method: 'getUser',
    effect: 'read',
    summary: 'A human in the caller’s org.',
    access: 'participant',
    request: named('GetUserRequest', z.object({ user: UserId })),
    response: Human,
  }),
  createAgent: defineApi({
    service: 'registry',
    method: 'createAgent',
    summary:
      'Register an agent owned by the caller (or, for an admin, by `owner`), create its inbox and return its credentials once.',
    access: 'human',
    request: named('CreateAgentRequest', z.object({ owner: UserId.optional(), card: AgentCard })),
    response: named('CreateAgentResponse', z.object({ agent: Agent, credentials: IssuedCredentials })),
  }),
  getAgent: defineApi({
    service: 'registry',
    method: 'getAgent',
    effect: 'read',
    summary: 'An agent the caller may see.',
    access: 'participant',
    request: named('GetAgentRequest', z.object({ agent: AgentId })),
    response: AgentListing,
  }),
  updateAgent: defineApi({
    service: 'registry',
    method: 'updateAgent',
    summary: 'Replace an agent’s card (its owner only), compare-and-set on revision.',
    access: 'participant',
    request: named(
      'UpdateAgentRequest',
      z.object({ agent: AgentId, revision: z.int().min(1), card: AgentCard }),
    ),
    response: Agent,
  }),
  deregisterAgent: defineApi({
    service: 'registry',
    method: 'deregisterAgent',
    summary: 'Remove an agent: its card, inbox consumer and credentials go with it.',
    access: 'human',
    request: named('DeregisterAgentRequest', z.object({ agent: AgentId })),
    response: named('DeregisterAgentResponse', z.object({ agent: AgentId })),
  }),
  listAgents: defineApi({
    service: 'registry',
    method: 'listAgents',
    effect: 'read',
    summary: 'Inventory: agents by owner or org, with presence (what the caller may see).',
    access: 'participant',
    request: named(
      'ListAgentsRequest',
      z.object({ owner: UserId.optional(), org: OrgId.optional(), ...Page }),
    ),
    response: named(
      'ListAgentsResponse',
      z.object({ agents: z.array(AgentListing), next: Cursor.optional() }),
    ),
  }),
  discover: defineApi({
    service: 'registry',
    method: 'discover',
    effect: 'read',
    summary:
      'Search agents by skill, tag, text, runtime, owner or org; only agents the caller may see; exact skill matches first.',
    access: 'participant',
    request: named(
      'DiscoverRequest',
      z.object({
        skill: z.string().max(100).optional(),
        tag: z.string().max(50).optional(),
        text: z
          .string()
          .max(200)
          .optional()
          .describe('Words matched (by prefix) in name, description and skills.'),
        runtime: RuntimeKind.optional(),
        owner: UserId.optional(),
        org: OrgId.optional(),
        ...Page,
      }),
    ),
    response: named('DiscoverResponse', z.object({ agents: z.array(AgentListing), next: Cursor.optional() })),
  }),
  checkManage: defineApi({
    service: 'registry',
    method: 'checkManage',
    effect: 'read',
    summary:
      'Services only: may `actor` manage `participant` (rotate or revoke its credentials)? The owner, an admin of its org, the superadmin and services may; a human may manage itself. Refusals are NOT_FOUND when the actor may not even see it, else PERMISSION_DENIED.',
    access: 'service',
    request: named('CheckManageRequest', z.object({ actor: PrincipalId, participant: ParticipantId })),
    response: ParticipantInfo,
  }),
  findUser: defineApi({
    service: 'registry',
    method: 'findUser',
    summary:
      'Services only: the human with this email address (case-insensitive), or NOT_FOUND. The gateway maps a verified OIDC email to a Parley user with it.',
    access: 'service',
    request: named('FindUserRequest', z.object({ email: z.email() })),
    response: Human,
  }),
  describeParticipant: defineApi({
    service: 'registry',
    method: 'describeParticipant',
    effect: 'read',
    summary:
      'Services only: what the registry knows of a participant (kind, name, org, owner). With `viewer`, NOT_FOUND unless the viewer may see it (the rules of discovery).',
    access: 'service',
    request: named(
      'DescribeParticipantRequest',
      z.object({ participant: ParticipantId, viewer: ParticipantId.optional() }),
    ),
    response: ParticipantInfo,
  }),
  presence: defineApi({
    service: 'registry',
    method: 'presence',
    effect: 'read',
    summary: 'Presence of participants the caller may see.',
    access: 'participant',
    request: named('GetPresenceRequest', z.object({ participants: z.array(ParticipantId).min(1).max(100) })),
    response: named('GetPresenceResponse', z.object({ presence: z.record(z.string(), Presence) })),
  }),
} as const;
