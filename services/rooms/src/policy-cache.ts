/**
 * The ingress's view of participant policy (`participant.<id>` in parley_policy: suspended or
 * revoked), kept current by a KV watch on every ingress replica, so a suspension takes effect at
 * the next send without a round trip per message. It is kit's StandingView, the same one every
 * service's API server checks.
 */
import type { KV } from '@nats-io/kv';
import { createStandingView, type Logger, type ParleyMetrics, type StandingView } from '@parley/kit';

/** See StandingView. */
export type PolicyCache = StandingView;

/** Watches `participant.*` of `kv`; see StandingView. */
export function createPolicyCache(kv: KV, log: Logger, metrics?: ParleyMetrics): Promise<PolicyCache> {
  return createStandingView(kv, { log, metrics });
}
