import { hostname } from 'node:os';
import { limits } from '@parley/contracts';
import { commonEnv, envBoolean, loadEnv } from '@parley/kit';
import * as z from 'zod';

/** The rooms service's environment. */
export const RoomsEnv = z.object({
  ...commonEnv,
  PARLEY_INGRESS: envBoolean
    .default(true)
    .describe('Serve the message ingress (parley.in.*.send) in this replica. @default true'),
  PARLEY_FANOUT: envBoolean
    .default(true)
    .describe('Take part in the fan-out (own partitions through leases) in this replica. @default true'),
  PARLEY_REPLICA_ID: z
    .string()
    .regex(/^[A-Za-z0-9_-]{1,64}$/)
    .optional()
    .describe('Name of this replica in leases. @default <hostname>-<pid>'),
  PARLEY_LEASE_TTL_MS: z.coerce
    .number()
    .int()
    .min(500)
    .max(300_000)
    .default(6_000)
    .describe('Fan-out lease TTL: how long a dead replica holds its partitions. @default 6000'),
  PARLEY_FANOUT_BATCH: z.coerce
    .number()
    .int()
    .min(1)
    .max(1_000)
    .default(100)
    .describe('Most room messages the fan-out handles per batch (publish all, await all, ack). @default 100'),
  PARLEY_MAX_MESSAGE_BYTES: z.coerce
    .number()
    .int()
    .min(1_024)
    .max(1_000_000)
    .default(limits.maxMessageBytes)
    .describe(`Largest send request accepted. @default ${limits.maxMessageBytes}`),
  PARLEY_HOP_LIMIT: z.coerce
    .number()
    .int()
    .min(1)
    .max(1_000)
    .default(16)
    .describe('Most hops a message may be from the human who started the conversation. @default 16'),
});

/** The rooms service's configuration. */
export type RoomsConfig = z.output<typeof RoomsEnv> & { PARLEY_REPLICA_ID: string };

/** Reads and validates the configuration from the environment. */
export function loadConfig(env: Record<string, string | undefined> = process.env): RoomsConfig {
  const c = loadEnv('rooms', RoomsEnv, env);
  return { ...c, PARLEY_REPLICA_ID: c.PARLEY_REPLICA_ID ?? `${hostname()}-${process.pid}` };
}

/** The configuration with every default, for composing the service in-process (standalone, tests). */
export function defaultConfig(overrides: Partial<RoomsConfig> = {}): RoomsConfig {
  return { ...loadConfig({}), ...overrides };
}
