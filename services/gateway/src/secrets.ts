/**
 * Bearer secrets the gateway hands out — API keys (`pak_<ULID>.<secret>`) and sign-in sessions
 * (`ses_<ULID>.<secret>`) — and webhook signing secrets. The id half finds the record in
 * `parley_gateway`; the secret half is 32 random bytes (base64url) of which only the SHA-256 is
 * stored, compared in constant time.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { newId } from '@parley/contracts';

/** A new bearer secret: its id, the string handed out once, and the hash to store. */
export function mintBearer(kind: 'apiKey' | 'session'): { id: string; token: string; secretSha256: string } {
  const id = newId(kind);
  const secret = randomBytes(32).toString('base64url');
  return { id, token: `${id}.${secret}`, secretSha256: sha256(secret) };
}

/** Splits a presented bearer into id and secret, or undefined when it is not shaped like one. */
export function parseBearer(
  token: string,
  prefix: 'pak' | 'ses',
): { id: string; secret: string } | undefined {
  const m = new RegExp(`^(${prefix}_[0-9A-HJKMNP-TV-Z]{26})\\.([A-Za-z0-9_-]{43})$`).exec(token);
  return m?.[1] && m[2] ? { id: m[1], secret: m[2] } : undefined;
}

/** True when `secret` hashes to `expectedSha256` (constant time). */
export function secretMatches(secret: string, expectedSha256: string): boolean {
  const a = Buffer.from(sha256(secret), 'hex');
  const b = Buffer.from(expectedSha256, 'hex');
  return a.length === b.length && timingSafeEqual(a, b);
}

/** A Standard Webhooks signing secret: `whsec_` + base64 of 32 random bytes. */
export function mintWebhookSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

/** The raw key bytes of a `whsec_` secret (what GitHub-style HMACs are computed with too). */
export function webhookKey(secret: string): Buffer {
  return Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
}

/** Hex SHA-256 of a string. */
export function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
