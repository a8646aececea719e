/**
 * Unique names. Org names are unique; a human's name is unique in its org, and so is an agent's
 * (so `@support-bot` names one agent of an org). Uniqueness is claimed with an atomic KV create of
 * `name.<scope>.<parent>.<digest>` in `parley_agents`, which holds across registry replicas; the
 * digest is of the case-folded name, so "Bot" and "bot" collide.
 */
import { createHash } from 'node:crypto';
import type { KV } from '@nats-io/kv';
import { ParleyError } from '@parley/contracts';
import { isKvConflict } from '@parley/kit';

/** The claim key of a name in its scope. */
export function nameKey(scope: 'org' | 'user' | 'agent', parent: string, name: string): string {
  const digest = createHash('sha256').update(name.normalize('NFKC').toLowerCase()).digest('base64url');
  return `name.${scope}.${parent}.${digest}`;
}

/** Claims a name for `holder`, or throws CONFLICT when it is taken. */
export async function claimName(kv: KV, key: string, holder: string, what: string): Promise<void> {
  try {
    await kv.create(key, holder);
  } catch (err) {
    if (isKvConflict(err)) {
      const e = await kv.get(key);
      // A claim left by a crash between claiming and writing the record is reused.
      if (e?.operation === 'PUT' && e.string() === holder) return;
      throw new ParleyError('CONFLICT', `${what} is already taken`, { details: { name: what } });
    }
    throw err;
  }
}

/** Releases a name claim (absent is fine). */
export async function releaseName(kv: KV, key: string): Promise<void> {
  await kv.delete(key);
}
