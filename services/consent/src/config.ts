import { commonEnv, loadEnv } from '@parley/kit';
import * as z from 'zod';

const DAY_MS = 24 * 60 * 60 * 1000;

/** The consent service's environment. */
export const ConsentEnv = z.object({
  ...commonEnv,
  CONSENT_REQUEST_TTL_MS: z.coerce
    .number()
    .int()
    .min(1_000)
    .max(365 * DAY_MS)
    .default(7 * DAY_MS)
    .describe(
      'How long a contact request stays pending before it turns expired (with an event and a notice). @default 604800000 (7 days)',
    ),
  CONSENT_SWEEP_MS: z.coerce
    .number()
    .int()
    .min(50)
    .max(600_000)
    .optional()
    .describe(
      'How often each replica looks for pending requests past their expiry. @default a tenth of CONSENT_REQUEST_TTL_MS, between 250 ms and 60 s',
    ),
});

/** The consent service's configuration. */
export type ConsentConfig = z.output<typeof ConsentEnv> & { CONSENT_SWEEP_MS: number };

/** Reads and validates the consent service's configuration from the environment. */
export function loadConfig(env: Record<string, string | undefined> = process.env): ConsentConfig {
  const c = loadEnv('consent', ConsentEnv, env);
  return {
    ...c,
    CONSENT_SWEEP_MS:
      c.CONSENT_SWEEP_MS ?? Math.min(60_000, Math.max(250, Math.floor(c.CONSENT_REQUEST_TTL_MS / 10))),
  };
}

/** The configuration with every default, for composing the service in-process (standalone, tests). */
export function defaultConfig(overrides: Partial<ConsentConfig> = {}): ConsentConfig {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(overrides)) if (v !== undefined) env[k] = String(v);
  return loadConfig(env);
}
