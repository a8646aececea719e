import { commonEnv, loadEnv } from '@parley/kit';
import * as z from 'zod';

/** The rooms service's environment. */
export const RoomsEnv = z.object({
  ...commonEnv,
});

/** The rooms service's configuration. */
export type RoomsConfig = z.output<typeof RoomsEnv>;

/** Reads and validates the configuration from the environment. */
export function loadConfig(env: Record<string, string | undefined> = process.env): RoomsConfig {
  return loadEnv('rooms', RoomsEnv, env);
}
