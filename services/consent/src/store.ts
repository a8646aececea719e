/**
 * Consent state in the `parley_contacts` bucket. Everything two participants have to do with each
 * other lives in ONE record, `pair.<lo>.<hi>` (ids in lexicographic order): the contact, the blocks
 * each side set, and the latest requests between them. Every change is a compare-and-set of that
 * record, so two requests crossing each other, an answer racing an expiry or a revocation racing an
 * accept are decided by whichever write lands first, and the other is re-evaluated against it:
 * there is never a second contact, nor a request answered twice.
 *
 * Other keys: `req.<creqId>` → `{ pair }` (so a request is found by id; written once, before the
 * request itself), `policy.agent.<agentId>` and `policy.org.<orgId>`.
 */
import type { KV, KvEntry } from '@nats-io/kv';
import type { ConsentPolicy, ContactRequest, ContactVia } from '@parley/contracts';
import { isKvConflict, updateKv } from '@parley/kit';

/** Most requests a pair record keeps (the newest; older ones live on in events and audit). */
export const MAX_REQUESTS_PER_PAIR = 10;

/** The relationship of two participants. */
export interface PairRecord {
  /** The two ids, in lexicographic order. */
  pair: [string, string];
  /** Each side's owner (a human owns itself): decides who may answer for it. */
  owners: Record<string, string>;
  contact?: { since: string; via: ContactVia; request: string };
  /** Who blocked whom: blocker id → since. */
  blocks: Record<string, string>;
  /** The latest requests between them, oldest first; at most one is pending. */
  requests: ContactRequest[];
  updatedAt: string;
}

/** An agent's consent policy (`policy.agent.<id>`). */
export interface AgentPolicyRecord {
  policy: ConsentPolicy;
  by: string;
  at: string;
}

/** An org's consent policy (`policy.org.<id>`). */
export interface OrgPolicyRecord {
  preApproveWithinOrg: boolean;
  by: string;
  at: string;
}

/** Keys of the `parley_contacts` bucket. */
export const contactKeys = {
  pair: (a: string, b: string) => {
    const [lo, hi] = ordered(a, b);
    return `pair.${lo}.${hi}`;
  },
  request: (id: string) => `req.${id}`,
  agentPolicy: (agent: string) => `policy.agent.${agent}`,
  orgPolicy: (org: string) => `policy.org.${org}`,
};

/** The two ids in the order a pair record keeps them. */
export function ordered(a: string, b: string): [string, string] {
  return a < b ? [a, b] : [b, a];
}

/** The other side of a pair. */
export function otherOf(rec: PairRecord, id: string): string {
  return rec.pair[0] === id ? rec.pair[1] : rec.pair[0];
}

/** The pending request of a pair, if any. */
export function pendingOf(rec: PairRecord | undefined): ContactRequest | undefined {
  return rec?.requests.find((r) => r.state === 'pending');
}

const enc = new TextEncoder();

/** Reads a JSON entry with its revision. */
export async function readJson<T>(kv: KV, key: string): Promise<{ value: T; revision: number } | undefined> {
  const e = await kv.get(key);
  return parseEntry<T>(e);
}

/** The value of a KV entry (undefined for deletes). */
export function parseEntry<T>(e: KvEntry | null): { value: T; revision: number } | undefined {
  if (e?.operation !== 'PUT' || e.length === 0) return undefined;
  return { value: e.json<T>(), revision: e.revision };
}

/** What a change of a pair decided. */
export interface PairChange<R> {
  /** The new record, or undefined to write nothing. */
  next?: PairRecord;
  /** What the caller gets back. */
  result: R;
}

/**
 * Read-modify-write of a pair record with compare-and-set: `decide` sees the current record (or
 * undefined) and returns what to write; on a conflicting write it runs again on the newer record.
 * `decide` may throw a ParleyError to refuse, which leaves the record as it is.
 */
export async function changePair<R>(
  kv: KV,
  key: string,
  decide: (current: PairRecord | undefined) => PairChange<R> | Promise<PairChange<R>>,
  attempts = 25,
): Promise<{ result: R; written?: { record: PairRecord; revision: number } }> {
  let result: R | undefined;
  const r = await updateKv<PairRecord>(
    kv,
    key,
    async (current) => {
      const change = await decide(current);
      result = change.result;
      if (change.next) change.next.requests = change.next.requests.slice(-MAX_REQUESTS_PER_PAIR);
      return change.next;
    },
    { attempts },
  );
  return r.written && r.value && r.revision !== undefined
    ? { result: result as R, written: { record: r.value, revision: r.revision } }
    : { result: result as R };
}

/** Writes a JSON value (last writer wins: policies). Returns the revision. */
export async function putJson(kv: KV, key: string, value: unknown): Promise<number> {
  return kv.put(key, enc.encode(JSON.stringify(value)));
}

/** Creates a JSON value once; true when it was created, false when it existed. */
export async function createJsonOnce(kv: KV, key: string, value: unknown): Promise<boolean> {
  try {
    await kv.create(key, enc.encode(JSON.stringify(value)));
    return true;
  } catch (err) {
    if (isKvConflict(err)) return false;
    throw err;
  }
}
