import { parseDelegationKeys } from '@parley/keys';
import { commonEnv, loadEnv } from '@parley/kit';
import * as z from 'zod';

/** The governance service's environment. */
export const GovernanceEnv = z.object({
  ...commonEnv,
  PARLEY_ACCOUNT_PUBLIC_KEY: z
    .string()
    .regex(/^A[A-Z2-7]{55}$/, { message: 'must be an account public key (A…)' })
    .describe('Public key of the PARLEY account that participant users belong to.'),
  PARLEY_PARTICIPANT_SIGNING_SEED: z
    .string()
    .regex(/^SA[A-Z2-7]{56}$/, { message: 'must be an account signing key seed (SA…)' })
    .describe(
      'Seed of the scoped participant signing key: it can mint participant users and nothing broader. Keep it in a secret.',
    ),
  PARLEY_OPERATOR_SEED: z
    .string()
    .regex(/^SO[A-Z2-7]{56}$/, { message: 'must be an operator seed (SO…)' })
    .optional()
    .describe(
      'Seed of the operator (or an operator signing key): re-signs the account JWT to push revocations. Unset: revoked creds are refused by the ingress only.',
    ),
  PARLEY_SERVICE_SIGNING_PUBLIC_KEY: z
    .string()
    .regex(/^A[A-Z2-7]{55}$/, { message: 'must be an account public key (A…)' })
    .optional()
    .describe('Public key of the service signing key (kept in the re-signed account JWT).'),
  PARLEY_SYSTEM_CREDS: z
    .string()
    .optional()
    .describe('Creds file of the system account user that pushes account JWT updates.'),
  PARLEY_DELEGATION_KEYS: z
    .string()
    .superRefine((v, ctx) => {
      try {
        parseDelegationKeys(v);
      } catch (err) {
        ctx.addIssue({ code: 'custom', message: (err as Error).message });
      }
    })
    .optional()
    .describe(
      'Ed25519 keys that sign delegation tokens, as JSON `{"keys":[{kty:"OKP",crv:"Ed25519",kid,x,d}]}` (the first signs, all verify); mount it from a secret. Unset: a key is generated at start, so tokens stop verifying when this replica restarts, and replicas do not share one — set it in production.',
    ),
  PARLEY_DELEGATION_MAX_DEPTH: z.coerce
    .number()
    .int()
    .min(1)
    .max(16)
    .default(4)
    .describe('Most actors in a delegation chain (the first actor counts as 1). @default 4'),
  PARLEY_DECISION_CACHE_MS: z.coerce
    .number()
    .int()
    .min(0)
    .max(60_000)
    .default(2_000)
    .describe(
      'How long an allow of authorize may be reused by the caller (the SDK) and by governance; revocations and suspensions invalidate it at once. 0 = never cache. @default 2000',
    ),
});

/** The governance service's configuration. */
export type GovernanceConfig = z.output<typeof GovernanceEnv>;

/** Reads and validates the configuration from the environment. */
export function loadConfig(env: Record<string, string | undefined> = process.env): GovernanceConfig {
  return loadEnv('governance', GovernanceEnv, env);
}
