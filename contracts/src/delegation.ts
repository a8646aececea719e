/**
 * Delegation tokens (on-behalf-of): compact JWS, EdDSA (Ed25519), signed by governance. The claims
 * follow RFC 8693: `sub` is the human whose authority the work carries, `act` the current actor,
 * with each earlier actor nested inside (`act.act…`, the first actor deepest). Verification needs
 * the JWKS (see `governanceApi.jwks` and `delegation.jwks.<kid>` in `parley_policy`); this module
 * only reads claims, so any client can show who a token speaks for.
 */
import * as z from 'zod';
import { ParleyError } from './errors.js';
import { OrgId, ParticipantId, TaskId, TokenId, UserId } from './ids.js';
import { named } from './registry-of-schemas.js';

/** `iss` and `aud` of every Parley delegation token. */
export const DELEGATION_ISSUER = 'parley';
/** The one signature algorithm Parley signs and accepts. */
export const DELEGATION_ALG = 'EdDSA';

/** An RFC 8693 actor claim: `{ sub, act? }`, the earlier actor nested in `act`. */
export interface ActorClaim {
  sub: string;
  act?: ActorClaim;
}

const ActorClaimSchema: z.ZodType<ActorClaim> = z.lazy(() =>
  z.object({ sub: ParticipantId, act: ActorClaimSchema.optional() }),
);

/** The claims of a delegation token. */
export const DelegationClaims = named(
  'DelegationClaims',
  z
    .object({
      iss: z.literal(DELEGATION_ISSUER),
      aud: z.union([z.literal(DELEGATION_ISSUER), z.array(z.string()).min(1)]),
      sub: UserId.describe('The human whose authority the token carries.'),
      org: OrgId.describe('The principal’s organisation.'),
      act: z
        .object({ sub: ParticipantId })
        .loose()
        .describe(
          'RFC 8693 actor: `sub` is the current actor; earlier actors are nested in `act` (first actor deepest).',
        ),
      scope: z.string().max(8000).describe('Space-separated scopes the current actor holds for this work.'),
      jti: TokenId,
      iat: z.int().min(0),
      exp: z.int().min(0),
      task: TaskId.optional(),
      ancestors: z
        .array(TokenId)
        .max(16)
        .optional()
        .describe('jti of every token this one was exchanged from, oldest first: revoking one revokes this.'),
    })
    .describe('Claims of a delegation token (JWS, EdDSA).'),
);
export type DelegationClaims = z.infer<typeof DelegationClaims>;

/** What a token says, in the shape Parley uses. */
export interface DelegationView {
  claims: DelegationClaims;
  /** The human the token speaks for. */
  principal: string;
  /** Actors from the first to the current one. */
  chain: string[];
  /** The current actor. */
  actor: string;
  scope: string[];
  /** The token and every token it was exchanged from. */
  lineage: string[];
  expiresAt: Date;
}

/** The actors of an `act` claim, first to current; INVALID_ARGUMENT when nested too deep. */
export function actorsOf(act: ActorClaim, maxDepth = 16): string[] {
  const out: string[] = [];
  for (let a: ActorClaim | undefined = act; a; a = a.act) {
    if (out.length >= maxDepth) throw new ParleyError('INVALID_ARGUMENT', 'the actor chain is too deep');
    out.push(a.sub);
  }
  return out.reverse();
}

/** Builds the nested `act` claim of a chain (first actor deepest). */
export function actClaimOf(chain: readonly string[]): ActorClaim {
  let act: ActorClaim | undefined;
  for (const sub of chain) act = act ? { sub, act } : { sub };
  if (!act) throw new ParleyError('INVALID_ARGUMENT', 'a delegation needs at least one actor');
  return act;
}

/** The Parley view of verified (or merely decoded) claims. */
export function delegationView(claims: DelegationClaims): DelegationView {
  const chain = actorsOf(ActorClaimSchema.parse(claims.act));
  return {
    claims,
    principal: claims.sub,
    chain,
    actor: chain[chain.length - 1] as string,
    scope: claims.scope.split(' ').filter(Boolean),
    lineage: [...(claims.ancestors ?? []), claims.jti],
    expiresAt: new Date(claims.exp * 1000),
  };
}

/**
 * Reads a token's claims WITHOUT verifying it (for display and for choosing what to do). Anything
 * that grants access verifies the signature first: governance and the rooms ingress do.
 */
export function readDelegationToken(token: string): DelegationView {
  const parts = typeof token === 'string' ? token.split('.') : [];
  if (parts.length !== 3 || !parts[1]) {
    throw new ParleyError('INVALID_ARGUMENT', 'not a delegation token (expected a compact JWS)');
  }
  let payload: unknown;
  try {
    payload = JSON.parse(base64UrlDecode(parts[1]));
  } catch {
    throw new ParleyError('INVALID_ARGUMENT', 'not a delegation token (the payload is not JSON)');
  }
  const parsed = DelegationClaims.safeParse(payload);
  if (!parsed.success) {
    throw new ParleyError(
      'INVALID_ARGUMENT',
      `not a Parley delegation token: ${parsed.error.issues[0]?.message}`,
    );
  }
  return delegationView(parsed.data);
}

/** Decodes base64url to a UTF-8 string (no Buffer: contracts also run in browsers). */
function base64UrlDecode(text: string): string {
  const b64 = text.replaceAll('-', '+').replaceAll('_', '/');
  const bin = atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4));
  return new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
}
