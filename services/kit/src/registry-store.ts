/**
 * The layout of the `parley_agents` bucket that more than the registry writes: the keys of its
 * records, the unique-name claims, and the seed of the first org and its admin. The registry
 * service owns the bucket; `parley init` seeds it before any service runs (so it must not start
 * the registry to do so), and both write the same records through this one module.
 */
import { createHash } from 'node:crypto';
import type { JetStreamManager } from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import type { BackboneOptions } from '@parley/contracts';
import { buckets, Human, Org, ParleyError } from '@parley/contracts';
import { ensureInboxConsumer } from './backbone.js';
import { isKvConflict } from './nats-errors.js';

/** Keys of the `parley_agents` bucket. */
export const registryKeys = {
  org: (id: string) => `org.${id}`,
  user: (id: string) => `user.${id}`,
  agent: (id: string) => `agent.${id}`,
};

/**
 * The claim key of a name in its scope. Org names are unique; a human's name is unique in its org,
 * and so is an agent's (so `@support-bot` names one agent of an org). Uniqueness is claimed with an
 * atomic KV create of `name.<scope>.<parent>.<digest>`, which holds across registry replicas; the
 * digest is of the case-folded name, so "Bot" and "bot" collide.
 */
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

/** Opens the `parley_agents` bucket. */
export function openRegistryBucket(nc: NatsConnection): Promise<KV> {
  return new Kvm(nc).open(buckets.agents);
}

/** Options of {@link seedRegistry}. */
export interface SeedRegistryOptions {
  /** The `parley_agents` bucket (see {@link openRegistryBucket}). */
  kv: KV;
  jsm: JetStreamManager;
  org: { id: string; name: string };
  admin: { id: string; name: string };
  backbone?: BackboneOptions | undefined;
}

/** A record {@link seedRegistry} wrote. */
export interface SeededRecord {
  key: string;
  revision: number;
  value: Org | Human;
}

/**
 * Writes the first org and its admin (a superadmin) with their name claims, and the admin's inbox
 * consumer. Idempotent: what an earlier seed wrote is left as it is. Returns what it created.
 */
export async function seedRegistry(o: SeedRegistryOptions): Promise<SeededRecord[]> {
  const { kv } = o;
  const now = new Date().toISOString();
  const { org, admin } = o;
  const orgRecord = Org.parse({ id: org.id, name: org.name, createdAt: now });
  const adminRecord = Human.parse({
    id: admin.id,
    org: org.id,
    name: admin.name,
    role: 'admin',
    superadmin: true,
    createdAt: now,
  });
  await claimName(kv, nameKey('org', '_', org.name), org.id, `organisation name "${org.name}"`);
  await claimName(kv, nameKey('user', org.id, admin.name), admin.id, `name "${admin.name}"`);
  const created: SeededRecord[] = [];
  for (const [key, value] of [
    [registryKeys.org(org.id), orgRecord],
    [registryKeys.user(admin.id), adminRecord],
  ] as const) {
    try {
      created.push({ key, revision: await kv.create(key, JSON.stringify(value)), value });
    } catch (err) {
      // Already seeded on an earlier start.
      if (!isKvConflict(err)) throw err;
    }
  }
  // The admin takes part like anyone: it needs an inbox.
  await ensureInboxConsumer(o.jsm, admin.id, o.backbone);
  return created;
}
