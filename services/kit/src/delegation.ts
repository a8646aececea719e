/**
 * Verifying delegation tokens where they are used — the rooms ingress on every send that carries
 * one, governance in authorize and exchange — without a round trip per token: the public keys
 * (`delegation.jwks.<kid>`) and the revocations (`delegation.revoked.jti.<jti>`,
 * `delegation.revoked.principal.<id>`) live in `parley_policy`, and every verifier keeps them in
 * memory through a KV watch. A revocation written by governance therefore reaches every replica
 * as fast as a suspension does.
 *
 * Signature checks (EdDSA through WebCrypto, ~0.4 ms) are cached per token string; what can change
 * while a token is cached — its expiry and revocations — is checked on every call.
 */
import type { KV } from '@nats-io/kv';
import {
  DELEGATION_ALG,
  DELEGATION_ISSUER,
  DelegationClaims,
  type DelegationView,
  delegationView,
  Jwk,
  ParleyError,
  policyKeys,
  RevokedPrincipal,
  RevokedToken,
} from '@parley/contracts';
import { createLocalJWKSet, type JWTVerifyGetKey, jwtVerify } from 'jose';
import type { Logger } from 'pino';
import { type KvWatch, watchKv } from './kv.js';

/** Verifies delegation tokens against the published keys and revocations. */
export interface DelegationVerifier {
  /**
   * The token's verified view. Throws UNAUTHENTICATED (forged, altered, unknown key, `alg: none`,
   * not a Parley token), EXPIRED or REVOKED.
   */
  verify(token: string, now?: number): Promise<DelegationView>;
  /** Throws REVOKED when the token or one it was exchanged from, or a participant of it, was revoked. */
  checkRevoked(view: DelegationView): void;
  /** Adds a key at once (governance knows its own before the watch delivers it). */
  addKey(jwk: Jwk): void;
  /** Applies a revocation this process just wrote, before the watch brings it back. */
  markRevoked(r: { token?: RevokedToken; principal?: RevokedPrincipal }): void;
  /** Called after a revocation arrives (with the jti or participant it names). */
  onRevocation(listener: (r: { jti?: string; participant?: string }) => void): void;
  /** Number of keys known. */
  keyCount(): number;
  stop(): void;
}

/** Options of {@link createDelegationVerifier}. */
export interface DelegationVerifierOptions {
  /** Verified tokens kept (LRU). @default 10000 */
  cacheSize?: number;
  /** Clock skew tolerated on `exp`/`iat`, seconds. @default 5 */
  clockToleranceSeconds?: number;
}

const JWKS_PREFIX = policyKeys.jwk('');
const JTI_PREFIX = policyKeys.revokedToken('');
const PRINCIPAL_PREFIX = policyKeys.revokedPrincipal('');

function unauthenticated(why: string): ParleyError {
  return new ParleyError('UNAUTHENTICATED', `the delegation token is not valid: ${why}`);
}

/** Starts a verifier fed by `policy` (the `parley_policy` bucket); resolves once it caught up. */
export async function createDelegationVerifier(
  policy: KV,
  log: Logger,
  options: DelegationVerifierOptions = {},
): Promise<DelegationVerifier> {
  const tolerance = options.clockToleranceSeconds ?? 5;
  const cacheSize = options.cacheSize ?? 10_000;
  const keys = new Map<string, Jwk>();
  const revokedJti = new Map<string, RevokedToken>();
  const revokedParticipant = new Map<string, RevokedPrincipal>();
  const verified = new Map<string, DelegationView>();
  const listeners: ((r: { jti?: string; participant?: string }) => void)[] = [];
  let keySet: JWTVerifyGetKey | undefined;

  const rebuildKeySet = () => {
    keySet = keys.size ? createLocalJWKSet({ keys: [...keys.values()] }) : undefined;
    // A key that disappeared must not keep vouching for tokens it signed.
    verified.clear();
  };

  const watches: KvWatch[] = [];
  watches.push(
    await watchKv(policy, {
      key: `${JWKS_PREFIX}*`,
      onEntry: (e) => {
        const kid = e.key.slice(JWKS_PREFIX.length);
        if (e.operation === 'PUT' && e.length > 0) keys.set(kid, Jwk.parse(e.json()));
        else keys.delete(kid);
        rebuildKeySet();
      },
      onError: (err) => log.error({ err }, 'unreadable delegation key'),
      log,
    }),
  );
  watches.push(
    await watchKv(policy, {
      key: 'delegation.revoked.>',
      onEntry: (e) => {
        const put = e.operation === 'PUT' && e.length > 0;
        if (e.key.startsWith(JTI_PREFIX)) {
          const jti = e.key.slice(JTI_PREFIX.length);
          if (put) revokedJti.set(jti, RevokedToken.parse(e.json()));
          else revokedJti.delete(jti);
          for (const l of listeners) l({ jti });
        } else if (e.key.startsWith(PRINCIPAL_PREFIX)) {
          const participant = e.key.slice(PRINCIPAL_PREFIX.length);
          if (put) revokedParticipant.set(participant, RevokedPrincipal.parse(e.json()));
          else revokedParticipant.delete(participant);
          for (const l of listeners) l({ participant });
        }
      },
      onError: (err) => log.error({ err }, 'unreadable delegation revocation'),
      log,
    }),
  );
  await Promise.all(watches.map((w) => w.initialized));

  function checkRevoked(view: DelegationView): void {
    for (const jti of view.lineage) {
      const r = revokedJti.get(jti);
      if (r) {
        throw new ParleyError(
          'REVOKED',
          `the delegation token was revoked${jti === view.claims.jti ? '' : ` (it was exchanged from ${jti})`}: ${r.reason}`,
          { details: { jti, by: r.by, at: r.at } },
        );
      }
    }
    for (const p of [view.principal, ...view.chain]) {
      const r = revokedParticipant.get(p);
      if (r && view.claims.iat <= r.before) {
        throw new ParleyError(
          'REVOKED',
          `every delegation of ${p} issued before ${r.at} was revoked: ${r.reason}`,
          {
            details: { participant: p, by: r.by, at: r.at },
          },
        );
      }
    }
  }

  function checkTime(view: DelegationView, now: number): void {
    if (view.claims.exp + tolerance <= now / 1000) {
      throw new ParleyError('EXPIRED', `the delegation token expired at ${view.expiresAt.toISOString()}`, {
        details: { jti: view.claims.jti },
      });
    }
  }

  async function verifySignature(token: string): Promise<DelegationView> {
    if (!keySet) throw unauthenticated('no delegation keys are published');
    let payload: unknown;
    try {
      ({ payload } = await jwtVerify(token, keySet, {
        algorithms: [DELEGATION_ALG],
        issuer: DELEGATION_ISSUER,
        audience: DELEGATION_ISSUER,
        // Expiry is checked below, for every use of a cached token too, as EXPIRED.
        currentDate: new Date(0),
        clockTolerance: tolerance,
      }));
    } catch (err) {
      const code = (err as { code?: string }).code ?? '';
      throw unauthenticated(
        code === 'ERR_JOSE_ALG_NOT_ALLOWED'
          ? `only ${DELEGATION_ALG} is accepted`
          : code === 'ERR_JWKS_NO_MATCHING_KEY'
            ? 'signed by a key Parley does not know'
            : code === 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED'
              ? 'the signature does not match (forged or altered)'
              : code || (err as Error).message,
      );
    }
    const claims = DelegationClaims.safeParse(payload);
    if (!claims.success)
      throw unauthenticated(`not a Parley delegation (${claims.error.issues[0]?.message})`);
    try {
      return delegationView(claims.data);
    } catch (err) {
      throw unauthenticated((err as Error).message);
    }
  }

  return {
    async verify(token, now = Date.now()) {
      if (typeof token !== 'string' || token.length > 8192) throw unauthenticated('not a compact JWS');
      let view = verified.get(token);
      if (view) {
        verified.delete(token);
        verified.set(token, view);
      } else {
        view = await verifySignature(token);
        verified.set(token, view);
        if (verified.size > cacheSize) {
          const oldest = verified.keys().next();
          if (!oldest.done) verified.delete(oldest.value);
        }
      }
      checkTime(view, now);
      checkRevoked(view);
      return view;
    },
    checkRevoked,
    addKey(jwk) {
      const parsed = Jwk.parse(jwk);
      if (keys.get(parsed.kid)?.x === parsed.x) return;
      keys.set(parsed.kid, parsed);
      rebuildKeySet();
    },
    markRevoked(r) {
      if (r.token) {
        revokedJti.set(r.token.jti, r.token);
        for (const l of listeners) l({ jti: r.token.jti });
      }
      if (r.principal) {
        revokedParticipant.set(r.principal.participant, r.principal);
        for (const l of listeners) l({ participant: r.principal.participant });
      }
    },
    onRevocation(listener) {
      listeners.push(listener);
    },
    keyCount: () => keys.size,
    stop() {
      for (const w of watches) w.stop();
    },
  };
}
