import * as z from 'zod';

/** Thrown when the environment does not describe a valid configuration; lists every problem. */
export class ConfigError extends Error {
  constructor(
    readonly service: string,
    readonly problems: string[],
  ) {
    super(`invalid configuration for ${service}:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/**
 * Validates `env` against `schema`: an empty string counts as unset, every problem is reported at
 * once, and the result is frozen. Each service's `src/config.ts` calls this with `process.env`.
 */
export function loadEnv<S extends z.ZodObject>(
  service: string,
  schema: S,
  env: Record<string, string | undefined>,
): Readonly<z.output<S>> {
  const cleaned: Record<string, string> = {};
  for (const key of Object.keys(schema.shape)) {
    const v = env[key];
    if (v !== undefined && v !== '') cleaned[key] = v;
  }
  const result = schema.safeParse(cleaned);
  if (!result.success) {
    throw new ConfigError(
      service,
      result.error.issues.map((i) => `${i.path.join('.') || '(env)'}: ${i.message}`),
    );
  }
  return Object.freeze(result.data);
}

/** An environment flag: `1/true/yes/on` or `0/false/no/off`. */
export const envBoolean = z
  .enum(['1', '0', 'true', 'false', 'yes', 'no', 'on', 'off'])
  .transform((v) => ['1', 'true', 'yes', 'on'].includes(v));

/** A TCP port from the environment. */
export const envPort = z.coerce.number().int().min(0).max(65535);

/** Variables every service reads: how to reach NATS, logging and the HTTP endpoint. */
export const commonEnv = {
  NATS_URL: z
    .string()
    .default('nats://127.0.0.1:4222')
    .describe('Comma-separated NATS server URLs. @default nats://127.0.0.1:4222'),
  NATS_CREDS: z
    .string()
    .optional()
    .describe('Path to the service’s NATS creds file (operator mode). Unset: no credentials.'),
  LOG_LEVEL: z
    .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])
    .default('info')
    .describe('pino log level. @default info'),
  HTTP_HOST: z
    .string()
    .default('0.0.0.0')
    .describe('Address of the health/metrics endpoint. @default 0.0.0.0'),
  HTTP_PORT: envPort
    .default(8080)
    .describe('Port of the health/metrics endpoint (/healthz, /readyz). @default 8080'),
  PARLEY_REPLICAS: z.coerce
    .number()
    .int()
    .min(1)
    .max(5)
    .default(1)
    .describe('Replicas of streams and buckets created at startup. @default 1'),
  PARLEY_PARTITIONS: z.coerce
    .number()
    .int()
    .min(1)
    .max(4096)
    .default(16)
    .describe('Fan-out partitions of the room log (fixed per deployment). @default 16'),
} as const;

/** Splits a comma-separated server list. */
export function serverList(value: string): string[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}
