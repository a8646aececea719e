/**
 * OIDC bearer tokens: verified with jose against the issuer's discovery document and JWKS. The
 * JWKS is fetched from `jwks_uri` and refetched when a token names a key id it does not hold (key
 * rotation), at most every `PARLEY_OIDC_JWKS_COOLDOWN_S`. Checked: signature (asymmetric algorithms only — `none` and HMAC
 * are refused, since an HMAC "public" key would let anyone sign), `iss`, `aud`, `exp`, `nbf`, `iat`
 * with a bounded clock skew.
 */
import { ParleyError } from '@parley/contracts';
import { createRemoteJWKSet, errors, type JWTPayload, jwtVerify } from 'jose';

/** Algorithms an identity provider may sign with. */
const ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'];

/** What the gateway takes from a verified token. */
export interface OidcIdentity {
  issuer: string;
  subject: string;
  /** Present only when the issuer says it is verified. */
  email?: string;
  name?: string;
  /** Seconds since the epoch. */
  expiresAt: number;
}

/** Options of {@link createOidcVerifier}. */
export interface OidcOptions {
  issuer: string;
  audience: string;
  clockSkewSeconds: number;
  /** Least seconds between JWKS refetches for unknown key ids. */
  jwksCooldownSeconds: number;
}

/** A verifier for one issuer. */
export function createOidcVerifier(o: OidcOptions) {
  let jwks: Promise<ReturnType<typeof createRemoteJWKSet>> | undefined;

  async function discover(): Promise<ReturnType<typeof createRemoteJWKSet>> {
    const url = new URL(
      '.well-known/openid-configuration',
      o.issuer.endsWith('/') ? o.issuer : `${o.issuer}/`,
    );
    const res = await fetch(url, { signal: AbortSignal.timeout(5000) });
    if (!res.ok) throw new Error(`discovery document: HTTP ${res.status}`);
    const doc = (await res.json()) as { issuer?: string; jwks_uri?: string };
    // The discovery document must name the same issuer (OpenID Connect Discovery §4.3).
    if (doc.issuer !== o.issuer) throw new Error(`discovery names issuer ${doc.issuer}, not ${o.issuer}`);
    if (!doc.jwks_uri) throw new Error('discovery document has no jwks_uri');
    return createRemoteJWKSet(new URL(doc.jwks_uri), {
      cooldownDuration: o.jwksCooldownSeconds * 1000,
      timeoutDuration: 5000,
    });
  }

  return {
    /** Verifies a token; `UNAUTHENTICATED` (or `EXPIRED`) for anything wrong, `UNAVAILABLE` when the issuer cannot be reached. */
    async verify(token: string): Promise<OidcIdentity> {
      if (!jwks) {
        jwks = discover();
        jwks.catch(() => {
          jwks = undefined;
        });
      }
      let keys: ReturnType<typeof createRemoteJWKSet>;
      try {
        keys = await jwks;
      } catch (err) {
        throw new ParleyError('UNAVAILABLE', 'the identity provider cannot be reached', {
          cause: err,
          retryAfterMs: 5000,
        });
      }
      let payload: JWTPayload;
      try {
        ({ payload } = await jwtVerify(token, keys, {
          issuer: o.issuer,
          audience: o.audience,
          algorithms: ALGORITHMS,
          clockTolerance: o.clockSkewSeconds,
          requiredClaims: ['exp', 'sub'],
        }));
      } catch (err) {
        if (err instanceof errors.JWTExpired) throw new ParleyError('EXPIRED', 'the token expired');
        if (err instanceof errors.JWKSTimeout) {
          throw new ParleyError('UNAVAILABLE', 'the identity provider’s keys cannot be fetched', {
            retryAfterMs: 5000,
          });
        }
        throw new ParleyError('UNAUTHENTICATED', 'the token is not valid for this gateway');
      }
      const email =
        typeof payload.email === 'string' && payload.email_verified === true ? payload.email : undefined;
      return {
        issuer: o.issuer,
        subject: payload.sub as string,
        ...(email ? { email } : {}),
        ...(typeof payload.name === 'string' ? { name: payload.name } : {}),
        expiresAt: payload.exp as number,
      };
    },
  };
}

/** The verifier's API. */
export type OidcVerifier = ReturnType<typeof createOidcVerifier>;
