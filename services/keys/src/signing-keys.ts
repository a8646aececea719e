/**
 * The keys that sign delegation tokens (Ed25519, JWS `alg: EdDSA`). Locally they are generated on
 * first run into `.parley/delegation-keys.json`; in production they come from a Kubernetes secret
 * as `PARLEY_DELEGATION_KEYS` (the same JSON). The first key signs; every key is published (as
 * `delegation.jwks.<kid>` in `parley_policy` and through `governance.jwks`), so a new key can be
 * put first while tokens signed by the old one are still honoured until they expire.
 */
import { createHash, generateKeyPairSync, type webcrypto } from 'node:crypto';
import type { Jwk } from '@parley/contracts';
import { importJWK } from 'jose';
import * as z from 'zod';

const Base64Url = z.string().regex(/^[A-Za-z0-9_-]{43}$/, { message: 'a 32-byte base64url value' });

/** One private signing key, as a JWK. */
export const DelegationPrivateKey = z.object({
  kty: z.literal('OKP'),
  crv: z.literal('Ed25519'),
  kid: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/),
  x: Base64Url,
  d: Base64Url,
  createdAt: z.iso.datetime().optional(),
});
export type DelegationPrivateKey = z.infer<typeof DelegationPrivateKey>;

/** The file / secret: `{ "keys": [ … ] }`, the first one signs. */
export const DelegationKeySet = z.object({ keys: z.array(DelegationPrivateKey).min(1).max(10) });
export type DelegationKeySet = z.infer<typeof DelegationKeySet>;

/** Generates a new Ed25519 signing key; its kid is derived from the public key. */
export function createDelegationKey(): DelegationPrivateKey {
  const { privateKey } = generateKeyPairSync('ed25519');
  const jwk = privateKey.export({ format: 'jwk' }) as { x: string; d: string };
  const kid = `dk-${createHash('sha256').update(jwk.x).digest('base64url').slice(0, 16)}`;
  return { kty: 'OKP', crv: 'Ed25519', kid, x: jwk.x, d: jwk.d, createdAt: new Date().toISOString() };
}

/** The public half of a key, as published. */
export function publicJwk(k: DelegationPrivateKey): Jwk {
  return { kty: 'OKP', crv: 'Ed25519', x: k.x, kid: k.kid, alg: 'EdDSA', use: 'sig' };
}

/** Keys ready for use: the signer and every public key. */
export interface SigningKeys {
  kid: string;
  key: webcrypto.CryptoKey;
  published: Jwk[];
}

/** Parses a key set (the `PARLEY_DELEGATION_KEYS` JSON) and imports the signing key. */
export async function loadSigningKeys(set: DelegationKeySet): Promise<SigningKeys> {
  const parsed = DelegationKeySet.parse(set);
  const first = parsed.keys[0] as DelegationPrivateKey;
  const key = (await importJWK(
    { kty: 'OKP', crv: 'Ed25519', x: first.x, d: first.d },
    'EdDSA',
  )) as webcrypto.CryptoKey;
  return { kid: first.kid, key, published: parsed.keys.map(publicJwk) };
}

/** Parses the JSON of `PARLEY_DELEGATION_KEYS`, with a message naming the variable. */
export function parseDelegationKeys(json: string): DelegationKeySet {
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    throw new Error('PARLEY_DELEGATION_KEYS is not JSON');
  }
  const r = DelegationKeySet.safeParse(value);
  if (!r.success) {
    throw new Error(
      `PARLEY_DELEGATION_KEYS: ${r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
    );
  }
  return r.data;
}
