/**
 * Per-agent and per-room rate limits (token buckets): a send over either is refused with
 * RATE_LIMITED and `retryAfterMs`. Humans are limited per room only.
 *
 * With several ingress replicas each enforces its share: rate / N and burst / N, N = the live
 * replicas (see ingress-replicas.ts). NATS spreads a queue group's requests evenly at random, so
 * over any stretch of time the replicas together admit the configured rate, with no shared
 * counter and no round trip on the send path. The price: a sender exactly at its limit may be
 * refused a little early when its sends happen to bunch on one replica (a binomial spread around
 * the share), and a burst is `burst` in total, not per replica.
 */

import { ParleyError } from '@parley/contracts';
import type { ParleyMetrics } from '@parley/kit';
import type { SendGuard } from '../ingress.js';
import type { IngressReplicas } from './ingress-replicas.js';
import { type BucketLimits, TokenBuckets } from './token-bucket.js';

/** Options of {@link rateLimitGuard}; a rate of 0 turns that limit off. */
export interface RateLimitOptions {
  agent: BucketLimits;
  room: BucketLimits;
  replicas: Pick<IngressReplicas, 'count' | 'onChange'>;
  metrics?: ParleyMetrics | undefined;
}

const share = (l: BucketLimits, n: number): BucketLimits => ({
  ratePerSec: l.ratePerSec / n,
  burst: Math.max(1, l.burst / n),
});

/** The rate-limit guard. */
export function rateLimitGuard(o: RateLimitOptions): SendGuard {
  const n = o.replicas.count();
  const agents = new TokenBuckets(share(o.agent, n));
  const rooms = new TokenBuckets(share(o.room, n));
  o.replicas.onChange((count) => {
    agents.setLimits(share(o.agent, count));
    rooms.setLimits(share(o.room, count));
  });
  const refuse = (what: string, limit: BucketLimits, wait: number, details: Record<string, unknown>) => {
    o.metrics?.recordDenial('RATE_LIMITED');
    return new ParleyError(
      'RATE_LIMITED',
      `${what} is over its rate limit (${limit.ratePerSec}/s, bursts of ${limit.burst}): retry in ${wait} ms`,
      { retryAfterMs: wait, details: { ...details, ratePerSec: limit.ratePerSec, burst: limit.burst } },
    );
  };
  return {
    name: 'rate-limit',
    admit({ sender, room }) {
      const limitAgent = o.agent.ratePerSec > 0 && sender.startsWith('agt_');
      if (limitAgent) {
        const wait = agents.take(sender);
        if (wait > 0) throw refuse(sender, o.agent, wait, { limit: 'agent', participant: sender });
      }
      if (o.room.ratePerSec > 0) {
        const wait = rooms.take(room.id);
        if (wait > 0) {
          if (limitAgent) agents.refund(sender);
          throw refuse(`room ${room.id}`, o.room, wait, { limit: 'room', room: room.id });
        }
      }
      return undefined;
    },
  };
}
