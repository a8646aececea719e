/**
 * Discovery over the in-memory catalog: candidates come from the indexes (never a scan of the KV),
 * are filtered by visibility, ranked (exact skill id first), and paged with an offset cursor.
 */
import { ParleyError, type RuntimeKind } from '@parley/contracts';
import { canSee, type Viewer } from './access.js';
import { type AgentDoc, type Catalog, words } from './catalog.js';

/** A discovery query (the DiscoverRequest fields). */
export interface DiscoverQuery {
  skill?: string | undefined;
  tag?: string | undefined;
  text?: string | undefined;
  runtime?: RuntimeKind | undefined;
  owner?: string | undefined;
  org?: string | undefined;
  limit: number;
  cursor?: string | undefined;
}

/** Scores of a match, added up per agent. */
export const SCORES = {
  exactSkill: 1000,
  skillPrefix: 300,
  skillWord: 100,
  tag: 50,
  nameWord: 30,
  namePrefix: 20,
  skillTextWord: 12,
  skillTextPrefix: 8,
  descriptionWord: 6,
  descriptionPrefix: 4,
} as const;

function intersect(a: Map<string, number> | undefined, b: Map<string, number>): Map<string, number> {
  if (!a) return b;
  const out = new Map<string, number>();
  const [small, large] = a.size <= b.size ? [a, b] : [b, a];
  for (const [id, score] of small) {
    const other = large.get(id);
    if (other !== undefined) out.set(id, score + other);
  }
  return out;
}

function bump(m: Map<string, number>, ids: Iterable<string> | undefined, score: number) {
  if (!ids) return;
  for (const id of ids) m.set(id, Math.max(m.get(id) ?? 0, score));
}

function hasPrefix(set: Set<string>, prefix: string): boolean {
  for (const w of set) if (w.startsWith(prefix)) return true;
  return false;
}

/** Agents matching a skill: exact id, then id prefix, then a word of a skill name. */
function skillMatches(c: Catalog, skill: string): Map<string, number> {
  const q = skill.trim().toLowerCase();
  const m = new Map<string, number>();
  if (!q) return m;
  // Every word of the query in the agent's skill names (e.g. "code review" → "Code review").
  let named: Set<string> | undefined;
  for (const w of words(q)) {
    const ids = c.bySkillWord.get(w) ?? new Set<string>();
    named = named ? new Set([...named].filter((id) => ids.has(id))) : new Set(ids);
  }
  bump(m, named, SCORES.skillWord);
  for (const [id, ids] of c.bySkillId) if (id !== q && id.startsWith(q)) bump(m, ids, SCORES.skillPrefix);
  bump(m, c.bySkillId.get(q), SCORES.exactSkill);
  return m;
}

/** Agents where every word of `text` starts a word of their name, skills or description. */
function textMatches(c: Catalog, text: string): Map<string, number> | undefined {
  const terms = [...new Set(words(text))];
  if (terms.length === 0) return undefined;
  let result: Map<string, number> | undefined;
  for (const term of terms) {
    const ids = new Set<string>();
    for (const [w, posting] of c.byWord) if (w.startsWith(term)) for (const id of posting) ids.add(id);
    const scored = new Map<string, number>();
    for (const id of ids) {
      const doc = c.agents.get(id) as AgentDoc;
      let s = 0;
      if (doc.nameWords.has(term)) s += SCORES.nameWord;
      else if (hasPrefix(doc.nameWords, term)) s += SCORES.namePrefix;
      if (doc.skillWords.has(term)) s += SCORES.skillTextWord;
      else if (hasPrefix(doc.skillWords, term)) s += SCORES.skillTextPrefix;
      if (doc.descriptionWords.has(term)) s += SCORES.descriptionWord;
      else if (hasPrefix(doc.descriptionWords, term)) s += SCORES.descriptionPrefix;
      scored.set(id, s);
    }
    result = intersect(result, scored);
    if (result.size === 0) break;
  }
  return result;
}

function fromSet(ids: Set<string> | undefined): Map<string, number> {
  const m = new Map<string, number>();
  if (ids) for (const id of ids) m.set(id, 0);
  return m;
}

/** Decodes an offset cursor (`o<n>`). */
export function offsetOf(cursor: string | undefined): number {
  if (cursor === undefined) return 0;
  const m = /^o(\d{1,9})$/.exec(cursor);
  if (!m) throw new ParleyError('INVALID_ARGUMENT', 'cursor is not one this method returned');
  return Number(m[1]);
}

/** Runs a discovery query for `viewer`: the page of agent docs and the next cursor. */
export function discover(c: Catalog, viewer: Viewer, q: DiscoverQuery): { docs: AgentDoc[]; next?: string } {
  const offset = offsetOf(q.cursor);
  let scores: Map<string, number> | undefined;
  if (q.skill !== undefined) scores = intersect(scores, skillMatches(c, q.skill));
  if (q.tag !== undefined) {
    const tag = fromSet(c.byTag.get(q.tag.trim().toLowerCase()));
    for (const id of tag.keys()) tag.set(id, SCORES.tag);
    scores = intersect(scores, tag);
  }
  if (q.text !== undefined) {
    const t = textMatches(c, q.text);
    if (t) scores = intersect(scores, t);
  }
  if (q.runtime !== undefined) scores = intersect(scores, fromSet(c.byRuntime.get(q.runtime)));
  if (q.owner !== undefined) scores = intersect(scores, fromSet(c.byOwner.get(q.owner)));
  if (q.org !== undefined) scores = intersect(scores, fromSet(c.byOrg.get(q.org)));
  if (!scores) scores = fromSet(new Set(c.agents.keys()));

  const ranked: { doc: AgentDoc; score: number }[] = [];
  for (const [id, score] of scores) {
    const doc = c.agents.get(id);
    if (doc && canSee(viewer, doc.stored)) ranked.push({ doc, score });
  }
  ranked.sort(
    (a, b) =>
      b.score - a.score ||
      (a.doc.sortName < b.doc.sortName ? -1 : a.doc.sortName > b.doc.sortName ? 1 : 0) ||
      (a.doc.stored.id < b.doc.stored.id ? -1 : 1),
  );
  const page = ranked.slice(offset, offset + q.limit).map((r) => r.doc);
  const end = offset + page.length;
  return end < ranked.length ? { docs: page, next: `o${end}` } : { docs: page };
}

/** Inventory: visible agents by owner and/or org, in creation order, paged after the cursor's id. */
export function listAgents(
  c: Catalog,
  viewer: Viewer,
  q: { owner?: string | undefined; org?: string | undefined; limit: number; cursor?: string | undefined },
): { docs: AgentDoc[]; next?: string } {
  if (q.cursor !== undefined && !/^agt_[0-9A-Z]{26}$/.test(q.cursor)) {
    throw new ParleyError('INVALID_ARGUMENT', 'cursor is not one this method returned');
  }
  let ids: Iterable<string>;
  if (q.owner !== undefined) ids = c.byOwner.get(q.owner) ?? [];
  else if (q.org !== undefined) ids = c.byOrg.get(q.org) ?? [];
  else ids = c.agents.keys();
  const docs: AgentDoc[] = [];
  for (const id of ids) {
    if (q.cursor !== undefined && id <= q.cursor) continue;
    const doc = c.agents.get(id);
    if (!doc) continue;
    if (q.org !== undefined && doc.stored.org !== q.org) continue;
    if (canSee(viewer, doc.stored)) docs.push(doc);
  }
  // ULIDs sort by creation time.
  docs.sort((a, b) => (a.stored.id < b.stored.id ? -1 : 1));
  const page = docs.slice(0, q.limit);
  const last = page[page.length - 1];
  return docs.length > q.limit && last ? { docs: page, next: last.stored.id } : { docs: page };
}
