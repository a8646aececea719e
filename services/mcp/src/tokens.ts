/**
 * Bearer tokens of the MCP bridge's HTTP endpoint: `mtk_<ULID>.<secret>`. The id half finds the
 * record in `parley_bindings` (`token.<id>`); the secret half is 32 random bytes (base64url) of
 * which only the SHA-256 is stored, compared in constant time.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { McpTokenId, newId } from '@parley/contracts';

/** A new token: its id, the string handed to the client once, and the hash to store. */
export function mintToken(): { id: string; token: string; secretSha256: string } {
  const id = newId('mcpToken');
  const secret = randomBytes(32).toString('base64url');
  return { id, token: `${id}.${secret}`, secretSha256: sha256(secret) };
}

/** Splits a presented token into id and secret, or undefined when it is not shaped like one. */
export function parseToken(token: string): { id: string; secret: string } | undefined {
  const dot = token.indexOf('.');
  if (dot < 0) return undefined;
  const id = token.slice(0, dot);
  const secret = token.slice(dot + 1);
  if (!McpTokenId.safeParse(id).success || !/^[A-Za-z0-9_-]{43}$/.test(secret)) return undefined;
  return { id, secret };
}

/** True when `secret` hashes to `expectedSha256` (constant time). */
export function secretMatches(secret: string, expectedSha256: string): boolean {
  const a = Buffer.from(sha256(secret), 'hex');
  const b = Buffer.from(expectedSha256, 'hex');
  return a.length === b.length && timingSafeEqual(a, b);
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
