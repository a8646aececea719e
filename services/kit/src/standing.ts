/**
 * Participants' standing (`participant.<id>` in `parley_policy`: suspended, revoked, over budget),
 * kept current by a KV watch, so a service refuses a suspended caller without a round trip. Every
 * service's API server checks it before a method that changes anything (serveApis), and the rooms
 * ingress before every send: "suspended" means suspended everywhere.
 */
import type { KV } from '@nats-io/kv';
import { ParleyError, type ParticipantPolicy, policyKeys, readStanding } from '@parley/contracts';
import type { Logger } from 'pino';
import { watchKv } from './kv.js';
import type { ParleyMetrics } from './metrics.js';

/** A live view of every participant that is not active. */
export interface StandingView {
  /**
   * Throws REVOKED, BUDGET_EXCEEDED (a budget suspension) or SUSPENDED when `participant` may not
   * act; returns for an active one (absent record) and for services.
   */
  check(participant: string): void;
  /** The standing of a participant that is not active; undefined = active. */
  get(participant: string): ParticipantPolicy | undefined;
  stop(): void;
}

/**
 * Watches `participant.*` of `kv` (the `parley_policy` bucket). A malformed record counts as
 * suspended (`readStanding`), is logged as an error and counted (`parley_malformed_records_total`).
 */
export async function createStandingView(
  kv: KV,
  o: { log: Logger; metrics?: ParleyMetrics | undefined },
): Promise<StandingView> {
  const blocked = new Map<string, ParticipantPolicy>();
  const prefix = policyKeys.participant('');
  const watch = await watchKv(kv, {
    key: `${prefix}*`,
    onEntry: (e) => {
      const id = e.key.slice(prefix.length);
      if (e.operation !== 'PUT' || e.length === 0) {
        blocked.delete(id);
        return;
      }
      const { standing, malformed } = readStanding(e.value);
      if (malformed) {
        o.log.error({ key: e.key, revision: e.revision }, 'malformed standing record: treated as suspended');
        o.metrics?.recordMalformedRecord('participant');
      }
      if (standing.status !== 'active') blocked.set(id, standing);
      else blocked.delete(id);
    },
    onError: (err) => o.log.error({ err }, 'unreadable policy entry'),
    log: o.log,
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
        { details: { participant, status: p.status, since: p.at } },
      );
    },
    get: (participant) => blocked.get(participant),
    stop: () => watch.stop(),
  };
}
