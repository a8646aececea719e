/** Consent policies of agents (their managers) and orgs (their admins). */
import { type ApiParsedRequest, type ApiResponse, type consentApi, isServiceId } from '@parley/contracts';
import type { RequestContext } from '@parley/kit';
import type { ConsentState } from '../state.js';
import { type AgentPolicyRecord, contactKeys, type OrgPolicyRecord, putJson } from '../store.js';

/** `consent.setPolicy`. */
export async function setPolicy(
  req: ApiParsedRequest<typeof consentApi.setPolicy>,
  ctx: RequestContext,
  c: ConsentState,
): Promise<ApiResponse<typeof consentApi.setPolicy>> {
  const { kv } = c.store();
  const at = new Date().toISOString();
  if ('agent' in req) {
    await c.participants.requireManage(ctx.caller, req.agent);
    const value: AgentPolicyRecord = { policy: req.policy, by: ctx.caller, at };
    const key = contactKeys.agentPolicy(req.agent);
    c.view.applyWrite(key, value, await putJson(kv, key, value));
    await c.recordChange({
      kind: 'policy.changed',
      action: 'policy',
      actor: ctx.caller,
      subject: req.agent,
      target: req.agent,
      data: { agent: req.agent, policy: req.policy },
    });
  } else {
    if (!isServiceId(ctx.caller)) await c.participants.requireOrgAdmin(ctx.caller, req.org);
    const value: OrgPolicyRecord = { preApproveWithinOrg: req.preApproveWithinOrg, by: ctx.caller, at };
    const key = contactKeys.orgPolicy(req.org);
    c.view.applyWrite(key, value, await putJson(kv, key, value));
    await c.recordChange({
      kind: 'policy.changed',
      action: 'policy',
      actor: ctx.caller,
      subject: req.org,
      target: req.org,
      data: { org: req.org, preApproveWithinOrg: req.preApproveWithinOrg },
    });
  }
  return { ok: true as const };
}
