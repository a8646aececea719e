/**
 * Scopes: what a delegation token, a person's grants or an agent's card allow. A scope is a string
 * such as `hr:payroll:read` or `tool:hr.payroll.read`; a pattern may end in a whole `*` segment
 * (`hr:*`, `tool:hr.*`, or `*` alone), which covers every scope with that prefix. Governance, the
 * SDK and bridges use these helpers, so "covers" means the same everywhere.
 */

/** True when `pattern` covers `scope` (equal, `*`, or a `prefix:*` / `prefix.*` the scope starts with). */
export function scopeCovers(pattern: string, scope: string): boolean {
  if (pattern === scope || pattern === '*') return true;
  if (!pattern.endsWith('*')) return false;
  const prefix = pattern.slice(0, -1);
  // Only a whole trailing segment is a wildcard: `hr:*` covers `hr:payroll`, `hr*` covers nothing else.
  if (!prefix.endsWith(':') && !prefix.endsWith('.')) return false;
  return scope.startsWith(prefix) && scope.length > prefix.length;
}

/** True when some pattern of `patterns` covers `scope`. */
export function anyScopeCovers(patterns: readonly string[], scope: string): boolean {
  for (const p of patterns) if (scopeCovers(p, scope)) return true;
  return false;
}

/** Drops duplicates and scopes another one of the list already covers; sorted. */
export function normalizeScopes(scopes: readonly string[]): string[] {
  const unique = [...new Set(scopes)];
  return unique.filter((s) => !unique.some((o) => o !== s && scopeCovers(o, s))).sort();
}

/**
 * The scopes both lists allow: for each pair, the narrower of the two when one covers the other.
 * `intersectScopes(['hr:*'], ['hr:payroll:read', 'it:x'])` → `['hr:payroll:read']`.
 */
export function intersectScopes(a: readonly string[], b: readonly string[]): string[] {
  const out: string[] = [];
  for (const x of a) if (anyScopeCovers(b, x)) out.push(x);
  for (const y of b) if (anyScopeCovers(a, y)) out.push(y);
  return normalizeScopes(out);
}

/** The scopes of `wanted` that `allowed` does not cover. */
export function uncoveredScopes(wanted: readonly string[], allowed: readonly string[]): string[] {
  return wanted.filter((s) => !anyScopeCovers(allowed, s));
}
