/**
 * Approval gates: an org policy rule (`OrgPolicy.requireApproval`) holds a tool call whose scope it
 * covers until a person says yes. `authorize` answers `APPROVAL_REQUIRED`; the SDK then asks for an
 * approval (`governance.requestApproval`, the approvers are pinged in their notice rooms), waits
 * (`governance.awaitApproval`), and runs the call only once approved — refused with
 * `APPROVAL_DENIED` (with the approver's reason) or `APPROVAL_TIMEOUT`. Every step is audited.
 */
import * as z from 'zod';
import { defineApi } from './api.js';
import { ApprovalRule, OrgPolicy, Scope } from './governance.js';
import { OrgId, ParticipantId, PrincipalId, RoomId, TaskId, ToolCallId, UserId } from './ids.js';
import { named } from './registry-of-schemas.js';

/** An approval's state. */
export const ApprovalState = named('ApprovalState', z.enum(['pending', 'approved', 'denied', 'timed_out']));
export type ApprovalState = z.infer<typeof ApprovalState>;

/** A held tool call and what became of it (`approval.<toolCallId>` in parley_policy). */
export const Approval = named(
  'Approval',
  z
    .object({
      id: ToolCallId.describe('The tool call held: one approval per call.'),
      state: ApprovalState,
      requester: ParticipantId.describe('Who wants to make the call.'),
      principal: ParticipantId.describe('Whose authority it is made under.'),
      chain: z.array(ParticipantId),
      tool: z.string(),
      action: Scope,
      argsDigest: z.string(),
      rule: ApprovalRule,
      approvers: z.array(UserId).describe('Who may decide (resolved when asked).'),
      reason: z.string().optional().describe('Why the requester wants it, as it wrote it.'),
      task: TaskId.optional(),
      room: RoomId.optional(),
      decidedBy: PrincipalId.optional(),
      decision: z.string().optional().describe('The approver’s reason.'),
      createdAt: z.iso.datetime(),
      expiresAt: z.iso.datetime().describe('Unanswered past it: timed_out.'),
      decidedAt: z.iso.datetime().optional(),
    })
    .describe('A tool call held for a person’s approval.'),
);
export type Approval = z.infer<typeof Approval>;

const Id = () => z.object({ id: ToolCallId });

/** Approval methods (served by governance, next to authorize). */
export const approvalsApi = {
  getOrgPolicy: defineApi({
    service: 'governance',
    method: 'getOrgPolicy',
    effect: 'read',
    summary:
      'An organisation’s policy (grants, denials, approval rules) as set last, to change it without losing the rest (an admin of the org).',
    access: 'human',
    request: named('GetOrgPolicyRequest', z.object({ org: OrgId })),
    response: named('GetOrgPolicyResponse', z.object({ policy: OrgPolicy.optional() })),
  }),
  requestApproval: defineApi({
    service: 'governance',
    method: 'requestApproval',
    summary:
      'Ask for approval of a tool call that authorize answered APPROVAL_REQUIRED: everything else is checked again, the approvers are pinged, and the call waits until approved, denied or timed out. Idempotent per tool call id.',
    access: 'participant',
    request: named(
      'RequestApprovalRequest',
      Id().extend({
        token: z.string().min(1).max(8192).optional(),
        action: Scope,
        tool: z.string().min(1).max(200),
        argsDigest: z.string().regex(/^sha256=[0-9a-f]{64}$/),
        reason: z.string().trim().min(1).max(2000).optional(),
        task: TaskId.optional(),
        room: RoomId.optional(),
        timeoutMs: z
          .int()
          .min(1_000)
          .max(7 * 24 * 3600_000)
          .default(300_000)
          .describe('How long the approvers have. @default 300000'),
      }),
    ),
    response: Approval,
  }),
  awaitApproval: defineApi({
    service: 'governance',
    method: 'awaitApproval',
    effect: 'read',
    summary:
      'The requester waits (up to waitMs) for its approval to be decided; answers the approval as it then is (timed_out once past its expiry).',
    access: 'participant',
    request: named(
      'AwaitApprovalRequest',
      Id().extend({ waitMs: z.int().min(0).max(25_000).default(20_000) }),
    ),
    response: Approval,
  }),
  listApprovals: defineApi({
    service: 'governance',
    method: 'listApprovals',
    effect: 'read',
    summary: 'Approvals the caller may decide (or asked for), newest first; pending only by default.',
    access: 'participant',
    request: named(
      'ListApprovalsRequest',
      z.object({ state: z.array(ApprovalState).max(4).default(['pending']) }),
    ),
    response: named('ListApprovalsResponse', z.object({ approvals: z.array(Approval) })),
  }),
  decideApproval: defineApi({
    service: 'governance',
    method: 'decideApproval',
    summary:
      'An approver approves or denies a pending approval, with a reason (CONFLICT once decided or timed out). Audited; the requester’s call proceeds or is refused with APPROVAL_DENIED.',
    access: 'human',
    request: named(
      'DecideApprovalRequest',
      Id().extend({
        decision: z.enum(['approve', 'deny']),
        reason: z.string().trim().min(1).max(2000),
      }),
    ),
    response: Approval,
  }),
} as const;
