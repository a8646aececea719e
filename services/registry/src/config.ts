import { commonEnv, loadEnv } from '@parley/kit';
import * as z from 'zod';

/** The registry's environment. */
export const RegistryEnv = z.object({
  ...commonEnv,
});

/** The registry's configuration. */
export type RegistryConfig = z.output<typeof RegistryEnv>;

/** Reads and validates the registry's configuration from the environment. */
export function loadConfig(env: Record<string, string | undefined> = process.env): RegistryConfig {
  return loadEnv('registry', RegistryEnv, env);
}
