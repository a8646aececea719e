/**
 * The ingress's view of participant policy (`participant.<id>` in parley_policy: suspended or
 * revoked), kept current by a KV watch on every ingress replica, so a suspension takes effect at
 * the next send without a round trip per message.
 */
import type { KV } from '@nats-io/kv';
import { ParleyError, type ParticipantPolicy, policyKeys } from '@parley/contracts';
import { type Logger, watchKv } from '@parley/kit';

export interface PolicyCache {
  /** Throws SUSPENDED or REVOKED when `participant` may not act. */
  check(participant: string): void;
  stop(): void;
}

export async function createPolicyCache(kv: KV, log: Logger): Promise<PolicyCache> {
  const blocked = new Map<string, ParticipantPolicy>();
  const prefix = policyKeys.participant('');
  const watch = await watchKv(kv, {
    key: `${prefix}*`,
    onEntry: (e) => {
      const id = e.key.slice(prefix.length);
      const policy = e.operation === 'PUT' && e.length > 0 ? e.json<ParticipantPolicy>() : undefined;
      if (policy && policy.status !== 'active') blocked.set(id, policy);
      else blocked.delete(id);
    },
    onError: (err) => log.error({ err }, 'unreadable policy entry'),
  });
  await watch.initialized;
  return {
    check(participant) {
      const p = blocked.get(participant);
      if (!p) return;
      // A budget suspension says so: the owner raises the budget rather than hunting a kill switch.
      throw new ParleyError(
        p.status === 'revoked' ? 'REVOKED' : p.cause === 'budget' ? 'BUDGET_EXCEEDED' : 'SUSPENDED',
        `${participant} is ${p.status}: ${p.reason}`,
        {
          details: { participant, status: p.status, since: p.at },
        },
      );
    },
    stop: () => watch.stop(),
  };
}
