/**
 * Governance's view of `parley_policy`: standings (`participant.*`), grants (`grants.*`), org
 * policies (`org.*`) and budgets (`budget.*.*`), kept in memory by KV watches on every replica and
 * written through (a replica sees its own writes at once). Everything decisions read comes from
 * here, so authorize does not read the bucket per call.
 */
import type { KV, KvEntry } from '@nats-io/kv';
import {
  Budget,
  Grants,
  OrgPolicy,
  type ParticipantPolicy,
  type PrincipalId,
  policyKeys,
  readStanding,
} from '@parley/contracts';
import { type KvWatch, type Logger, watchKv } from '@parley/kit';

/** Which part of the policy changed. */
export type PolicyChange =
  | { kind: 'participant'; id: string; value: ParticipantPolicy | undefined }
  | { kind: 'grants' | 'org' | 'budget'; id: string };

/** Opens the store; resolves once every current entry was read. */
export async function createPolicyStore(kv: KV, log: Logger) {
  const standings = new Map<string, ParticipantPolicy>();
  const grants = new Map<string, Grants>();
  const orgs = new Map<string, OrgPolicy>();
  const budgets = new Map<string, Budget>();
  const listeners: ((c: PolicyChange) => void)[] = [];
  const emit = (c: PolicyChange) => {
    for (const l of listeners) l(c);
  };

  function table<T>(
    prefix: string,
    map: Map<string, T>,
    parse: (v: unknown) => T,
    change: (id: string, value: T | undefined) => PolicyChange,
  ) {
    return (e: KvEntry) => {
      const id = e.key.slice(prefix.length);
      const value = e.operation === 'PUT' && e.length > 0 ? parse(e.json()) : undefined;
      if (value) map.set(id, value);
      else map.delete(id);
      emit(change(id, value));
    };
  }

  const watches: KvWatch[] = [];
  const watch = async (prefix: string, onEntry: (e: KvEntry) => void) => {
    watches.push(
      await watchKv(kv, {
        key: `${prefix}>`,
        onEntry,
        onError: (err, e) => log.error({ err, key: e.key }, 'unreadable policy entry'),
        log,
      }),
    );
  };
  const participantPrefix = policyKeys.participant('');
  const grantsPrefix = policyKeys.grants('');
  const orgPrefix = policyKeys.org('');
  const budgetPrefix = 'budget.';
  const onStanding = (e: KvEntry) => {
    // The same reading as every other service: a malformed record is suspended, never active.
    const id = e.key.slice(participantPrefix.length);
    let value: ParticipantPolicy | undefined;
    if (e.operation === 'PUT' && e.length > 0) {
      const read = readStanding(e.value);
      if (read.malformed) log.error({ key: e.key }, 'malformed standing record: treated as suspended');
      value = read.standing;
    }
    if (value) standings.set(id, value);
    else standings.delete(id);
    emit({ kind: 'participant', id, value });
  };
  const onGrants = table(
    grantsPrefix,
    grants,
    (v) => Grants.parse(v),
    (id) => ({ kind: 'grants', id }),
  );
  const onOrg = table(
    orgPrefix,
    orgs,
    (v) => OrgPolicy.parse(v),
    (id) => ({ kind: 'org', id }),
  );
  const onBudget = table(
    budgetPrefix,
    budgets,
    (v) => Budget.parse(v),
    (id) => ({ kind: 'budget', id }),
  );
  await watch(participantPrefix, onStanding);
  await watch(grantsPrefix, onGrants);
  await watch(orgPrefix, onOrg);
  await watch(budgetPrefix, onBudget);
  await Promise.all(watches.map((w) => w.initialized));

  async function put<T>(key: string, value: T, apply: (v: T) => void): Promise<T> {
    await kv.put(key, JSON.stringify(value));
    apply(value);
    return value;
  }

  return {
    /** A participant's standing (absent = active). */
    standing: (id: string): ParticipantPolicy | undefined => standings.get(id),
    /** Scopes a human holds: their grants and their org's. */
    holdings(userId: string, org: string | undefined): string[] {
      return [...(grants.get(userId)?.scopes ?? []), ...(org ? (orgs.get(org)?.grants ?? []) : [])];
    },
    orgPolicy: (org: string): OrgPolicy | undefined => orgs.get(org),
    budget: (kind: 'agent' | 'owner', id: string): Budget | undefined => budgets.get(`${kind}.${id}`),
    /** Every budget (the budgets read filters what a caller may see). */
    allBudgets: (): Budget[] => [...budgets.values()],
    /** Every person's grants (listGrants filters by org). */
    allGrants: (): Grants[] => [...grants.values()],
    setStanding: (id: string, value: ParticipantPolicy) =>
      put(policyKeys.participant(id), value, (v) => {
        standings.set(id, v);
        emit({ kind: 'participant', id, value: v });
      }),
    setGrants: (value: Grants) =>
      put(policyKeys.grants(value.participant), value, (v) => {
        grants.set(v.participant, v);
        emit({ kind: 'grants', id: v.participant });
      }),
    setOrgPolicy: (value: OrgPolicy) =>
      put(policyKeys.org(value.org), value, (v) => {
        orgs.set(v.org, v);
        emit({ kind: 'org', id: v.org });
      }),
    setBudget: (value: Budget) =>
      put(policyKeys.budget(value.kind, value.id), value, (v) => {
        budgets.set(`${v.kind}.${v.id}`, v);
        emit({ kind: 'budget', id: v.id });
      }),
    /** Called after every change (from this replica or any other). */
    onChange(listener: (c: PolicyChange) => void) {
      listeners.push(listener);
    },
    stop() {
      for (const w of watches) w.stop();
    },
  };
}

/** The store of {@link createPolicyStore}. */
export type PolicyStore = Awaited<ReturnType<typeof createPolicyStore>>;

/** A standing record. */
export function standingOf(
  status: ParticipantPolicy['status'],
  reason: string,
  by: PrincipalId,
  cause?: ParticipantPolicy['cause'],
): ParticipantPolicy {
  return { status, reason, at: new Date().toISOString(), by, ...(cause ? { cause } : {}) };
}
