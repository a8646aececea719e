/**
 * Each replica's in-memory view of `parley_contacts`, kept by a KV watch (the watch replays the last
 * value of every key, then streams changes), plus the replica's own writes at once (a caller reads
 * what it just wrote). It serves listings, policies and the expiry sweep; decisions that must be
 * exact (check, and every change) read the pair record from the bucket itself.
 */
import type { KvEntry } from '@nats-io/kv';
import type { ConsentPolicy, ContactRequest } from '@parley/contracts';
import { type AgentPolicyRecord, type OrgPolicyRecord, type PairRecord, parseEntry } from './store.js';

function addTo(map: Map<string, Set<string>>, key: string, value: string): void {
  let set = map.get(key);
  if (!set) {
    set = new Set();
    map.set(key, set);
  }
  set.add(value);
}

function removeFrom(map: Map<string, Set<string>>, key: string, value: string): void {
  const set = map.get(key);
  set?.delete(value);
  if (set?.size === 0) map.delete(key);
}

/** The view. */
export class ConsentView {
  readonly #pairs = new Map<string, { record: PairRecord; revision: number }>();
  readonly #revisions = new Map<string, number>();
  /** participant or owner → pair keys it is part of (directly or through its agents). */
  readonly #byParty = new Map<string, Set<string>>();
  /** pending request id → its pair key and expiry (ms). */
  readonly #pending = new Map<string, { key: string; expiresAt: number }>();
  readonly #agentPolicies = new Map<string, ConsentPolicy>();
  readonly #orgPreApproval = new Map<string, boolean>();

  /** Applies a watched entry (or a write of this replica); older revisions are ignored. */
  apply(e: KvEntry): void {
    const held = this.#revisions.get(e.key) ?? 0;
    if (e.revision <= held) return;
    this.#revisions.set(e.key, e.revision);
    const value = parseEntry<unknown>(e)?.value;
    if (e.key.startsWith('pair.')) this.#applyPair(e.key, value as PairRecord | undefined, e.revision);
    else if (e.key.startsWith('policy.agent.')) {
      const id = e.key.slice('policy.agent.'.length);
      if (value) this.#agentPolicies.set(id, (value as AgentPolicyRecord).policy);
      else this.#agentPolicies.delete(id);
    } else if (e.key.startsWith('policy.org.')) {
      const id = e.key.slice('policy.org.'.length);
      if (value) this.#orgPreApproval.set(id, (value as OrgPolicyRecord).preApproveWithinOrg);
      else this.#orgPreApproval.delete(id);
    }
  }

  /** Applies a record this replica just wrote. */
  applyWrite(key: string, record: PairRecord | AgentPolicyRecord | OrgPolicyRecord, revision: number): void {
    this.apply({
      key,
      revision,
      operation: 'PUT',
      length: 1,
      json: () => record,
    } as unknown as KvEntry);
  }

  #applyPair(key: string, record: PairRecord | undefined, revision: number): void {
    const old = this.#pairs.get(key)?.record;
    if (old) {
      for (const id of old.pair) removeFrom(this.#byParty, id, key);
      for (const owner of Object.values(old.owners)) removeFrom(this.#byParty, owner, key);
      for (const r of old.requests) this.#pending.delete(r.id);
    }
    if (!record) {
      this.#pairs.delete(key);
      return;
    }
    this.#pairs.set(key, { record, revision });
    for (const id of record.pair) addTo(this.#byParty, id, key);
    for (const owner of Object.values(record.owners)) addTo(this.#byParty, owner, key);
    for (const r of record.requests) {
      if (r.state === 'pending') this.#pending.set(r.id, { key, expiresAt: Date.parse(r.expiresAt) });
    }
  }

  /** Pair records `party` (a participant, or an owner through its agents) is part of. */
  pairsOf(party: string): PairRecord[] {
    const keys = this.#byParty.get(party);
    if (!keys) return [];
    const out: PairRecord[] = [];
    for (const k of keys) {
      const p = this.#pairs.get(k);
      if (p) out.push(p.record);
    }
    return out;
  }

  /** Pending requests whose expiry is at or before `now`: `[requestId, pairKey]`. */
  expiredAt(now: number): [string, string][] {
    const out: [string, string][] = [];
    for (const [id, p] of this.#pending) if (p.expiresAt <= now) out.push([id, p.key]);
    return out;
  }

  /** An agent's policy. @default agent_decides */
  agentPolicy(agent: string): ConsentPolicy {
    return this.#agentPolicies.get(agent) ?? 'agent_decides';
  }

  /** Whether an org pre-approves contacts inside it. @default false */
  orgPreApproves(org: string): boolean {
    return this.#orgPreApproval.get(org) ?? false;
  }

  /** Counts, for the start log line. */
  size(): { pairs: number; pending: number } {
    return { pairs: this.#pairs.size, pending: this.#pending.size };
  }
}

/** True when `r` is pending and not yet past its expiry. */
export function isLive(r: ContactRequest, now = Date.now()): boolean {
  return r.state === 'pending' && Date.parse(r.expiresAt) > now;
}
