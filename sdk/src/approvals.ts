/**
 * Approvals: a tool call that org policy holds for a person's yes (`APPROVAL_REQUIRED`) waits in
 * `agent.tools.call` until an approver decides. Approvers list and decide with `agent.approvals`
 * (or `parley approvals list|approve|deny`), and are pinged with an `approval_requested` delivery.
 */
import { type Approval, type ApprovalState, approvalsApi } from '@parley/contracts';
import type { Agent } from './agent.js';

/** A participant's approvals: `agent.approvals`. */
export class Approvals {
  readonly #agent: Agent;

  /** @internal created by {@link Agent} */
  constructor(agent: Agent) {
    this.#agent = agent;
  }

  /** Approvals this participant may decide (or asked for); pending ones by default. */
  async list(state: ApprovalState[] = ['pending']): Promise<Approval[]> {
    return (await this.#agent.call(approvalsApi.listApprovals, { state })).approvals;
  }

  /** Approves a held call, with a reason (audited). */
  approve(id: string, reason: string): Promise<Approval> {
    return this.#agent.call(approvalsApi.decideApproval, { id, decision: 'approve', reason });
  }

  /** Denies a held call, with a reason: the requester's call fails with APPROVAL_DENIED. */
  deny(id: string, reason: string): Promise<Approval> {
    return this.#agent.call(approvalsApi.decideApproval, { id, decision: 'deny', reason });
  }

  /** Waits until the approval `id` (asked for by this participant) is decided or times out. */
  async wait(id: string, signal?: AbortSignal): Promise<Approval> {
    for (;;) {
      const a = await this.#agent.call(
        approvalsApi.awaitApproval,
        { id, waitMs: 20_000 },
        { timeout: 30_000 },
      );
      if (a.state !== 'pending' || signal?.aborted) return a;
    }
  }
}
