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
});

/** The governance service's configuration. */
export type GovernanceConfig = z.output<typeof GovernanceEnv>;

/** Reads and validates the configuration from the environment. */
export function loadConfig(env: Record<string, string | undefined> = process.env): GovernanceConfig {
  return loadEnv('governance', GovernanceEnv, env);
}
