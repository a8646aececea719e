import { INBOX_SHARDS } from '@parley/contracts';
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

/** Samplers of `OTEL_TRACES_SAMPLER` that Parley supports (the specification's built-in ones). */
export const TRACES_SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;

const otlpProtocol = z.enum(['grpc', 'http/protobuf', 'http/json']);
const otlpUrl = z.url({ protocol: /^https?$/ });

/**
 * The standard OpenTelemetry variables Parley reads (the OTLP exporter also reads its own
 * `OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`, `…_COMPRESSION` and certificates directly).
 * No endpoint configured: spans are neither recorded nor exported, only propagated.
 */
export const telemetryEnv = {
  OTEL_SDK_DISABLED: envBoolean
    .default(false)
    .describe(
      'true: no telemetry at all, not even trace-context propagation through this process. @default false',
    ),
  OTEL_SERVICE_NAME: z
    .string()
    .optional()
    .describe(
      'service.name of a process that runs one service. @default parley-<service> (the standalone: parley-standalone; its services always export as parley-<service>)',
    ),
  OTEL_RESOURCE_ATTRIBUTES: z
    .string()
    .regex(/^([^=,\s]+=[^,]*)(,[^=,\s]+=[^,]*)*$/, 'expected key=value pairs separated by commas')
    .optional()
    .describe('Extra resource attributes, e.g. deployment.environment.name=prod. @default none'),
  OTEL_EXPORTER_OTLP_ENDPOINT: otlpUrl
    .optional()
    .describe(
      'Base URL of the OTLP receiver (Jaeger or a collector), e.g. http://localhost:4318; traces go to <url>/v1/traces. Unset: nothing is exported.',
    ),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: otlpUrl
    .optional()
    .describe('Full URL for traces, used as is; wins over OTEL_EXPORTER_OTLP_ENDPOINT.'),
  OTEL_EXPORTER_OTLP_PROTOCOL: otlpProtocol
    .default('http/protobuf')
    .describe('grpc, http/protobuf or http/json. @default http/protobuf'),
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: otlpProtocol
    .optional()
    .describe('Protocol for traces; wins over OTEL_EXPORTER_OTLP_PROTOCOL.'),
  OTEL_TRACES_EXPORTER: z
    .enum(['otlp', 'console', 'none'])
    .default('otlp')
    .describe('otlp (needs an endpoint), console (spans on stdout, for debugging) or none. @default otlp'),
  OTEL_TRACES_SAMPLER: z
    .enum(TRACES_SAMPLERS)
    .default('parentbased_always_on')
    .describe(`Sampler: ${TRACES_SAMPLERS.join(', ')}. @default parentbased_always_on`),
  OTEL_TRACES_SAMPLER_ARG: z.coerce
    .number()
    .min(0)
    .max(1)
    .optional()
    .describe('Ratio for the traceidratio samplers, 0 to 1. @default 1'),
} as const;

/** The telemetry settings, as {@link telemetryEnv} parses them. */
export type TelemetryConfig = z.output<z.ZodObject<typeof telemetryEnv>>;

/** Reads the telemetry settings alone (tests and tools; services get them with their config). */
export function loadTelemetryConfig(
  env: Record<string, string | undefined>,
  what = 'telemetry',
): TelemetryConfig {
  return loadEnv(what, z.object(telemetryEnv), env);
}

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
  NATS_RESPONDER_CREDS: z
    .string()
    .optional()
    .describe(
      'Path to the service’s responder creds (`svc-<name>-responder.creds`: publish `_INBOX.>` only): requests are received and answered on a second connection with them. Unset: answered on the NATS_CREDS connection (a warning is logged when NATS_CREDS is set).',
    ),
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
    .describe('Port of the health/metrics endpoint (/healthz, /readyz, /metrics). @default 8080'),
  PARLEY_STOP_TIMEOUT_MS: z.coerce
    .number()
    .int()
    .min(1000)
    .default(20_000)
    .describe(
      'How long a stop (SIGTERM, SIGINT) may take: what is still running then is named in an error log and abandoned, and the process exits 1. The chart sets it 5 s below the pod’s terminationGracePeriodSeconds (25000 with its 30 s), so the log says what hung before the kubelet’s SIGKILL. @default 20000',
    ),
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
  ...telemetryEnv,
} as const;

const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * The largest message a NATS server of Parley carries (`max_payload: 1MB` in its configuration): a
 * byte limit below it could not keep even one message, so it is refused.
 */
export const MIN_STREAM_BYTES = 1024 * 1024;

/**
 * JetStream refuses a stream whose max age is shorter than its duplicate window (2 minutes): an age
 * limit below it is refused at start instead of failing the stream update.
 */
export const MIN_MAX_AGE_MS = 120_000;

/** Fewest entries a room may be capped at: its creation and first joins are entries too. */
export const MIN_ROOM_CAP = 10;

const ageLimit = (what: string, fallback: number) =>
  z.coerce
    .number()
    .int()
    .min(0)
    .refine((v) => v === 0 || v >= MIN_MAX_AGE_MS, {
      message: `must be 0 (no age limit) or at least ${MIN_MAX_AGE_MS} ms (JetStream's duplicate window)`,
    })
    .default(fallback)
    .describe(`${what} (ms; 0 = no age limit, else at least ${MIN_MAX_AGE_MS}). @default ${fallback}`);

/**
 * The inboxes' byte limit is shared evenly by the {@link INBOX_SHARDS} inbox streams: each must keep
 * at least one message of the largest size.
 */
export const MIN_INBOX_BYTES = INBOX_SHARDS * MIN_STREAM_BYTES;

const byteLimit = (
  what: string,
  min = MIN_STREAM_BYTES,
  why = 'the largest message NATS carries, max_payload',
) =>
  z.coerce
    .number()
    .int()
    .min(0)
    .refine((v) => v === 0 || v >= min, {
      message: `must be 0 (no byte limit) or at least ${min} bytes (${why})`,
    })
    .default(0)
    .describe(`${what} (bytes; 0 = no limit, else at least ${min}). @default 0`);

/**
 * Retention of the room log and the inboxes: what the backbone setup (`parley-init backbone`, the
 * standalone) applies to PARLEY_ROOMS and the PARLEY_INBOX_<shard> streams at every start. What happens at each limit
 * is in docs/operations.md, "Retention".
 */
export const retentionEnv = {
  PARLEY_ROOMS_MAX_AGE_MS: ageLimit(
    'How long room history is kept; older entries are removed, history reads before them answer HISTORY_EXPIRED',
    90 * DAY_MS,
  ),
  PARLEY_ROOMS_MAX_BYTES: byteLimit(
    'Most bytes the room log keeps, all rooms together; the oldest entries are removed first',
  ),
  PARLEY_ROOMS_MAX_MSGS_PER_ROOM: z.coerce
    .number()
    .int()
    .min(0)
    .refine((v) => v === 0 || v >= MIN_ROOM_CAP, {
      message: `must be 0 (no cap) or at least ${MIN_ROOM_CAP} (a room's creation and joins are entries too)`,
    })
    .default(0)
    .describe(
      `Most entries kept per room (messages and membership events); a room's oldest go first, sends are never refused (0 = no cap, else at least ${MIN_ROOM_CAP}). @default 0`,
    ),
  PARLEY_INBOX_MAX_AGE_MS: ageLimit('How long an inbox entry is kept, delivered or not', 14 * DAY_MS),
  PARLEY_INBOX_MAX_BYTES: byteLimit(
    `Most bytes the inboxes keep, every participant together, shared evenly by the ${INBOX_SHARDS} inbox streams; the oldest entries of a stream are removed first`,
    MIN_INBOX_BYTES,
    `${MIN_STREAM_BYTES}, the largest message NATS carries, for each of the ${INBOX_SHARDS} inbox streams`,
  ),
  PARLEY_INBOX_MAX_MSGS_PER_ROOM: z.coerce
    .number()
    .int()
    .min(1)
    .default(10_000)
    .describe(
      'Most entries kept per participant and room in the inbox; the oldest go first, and a participant that comes back reads what it missed from room history. @default 10000',
    ),
} as const;

/** The retention settings, as {@link retentionEnv} parses them. */
export type RetentionConfig = z.output<z.ZodObject<typeof retentionEnv>>;

/** The backbone options the retention settings stand for. */
export function retentionOptions(c: RetentionConfig): {
  roomsMaxAgeMs: number;
  roomsMaxBytes: number;
  roomsMaxMsgsPerRoom: number;
  inboxMaxAgeMs: number;
  inboxMaxBytes: number;
  inboxMaxMsgsPerSubject: number;
} {
  return {
    roomsMaxAgeMs: c.PARLEY_ROOMS_MAX_AGE_MS,
    roomsMaxBytes: c.PARLEY_ROOMS_MAX_BYTES,
    roomsMaxMsgsPerRoom: c.PARLEY_ROOMS_MAX_MSGS_PER_ROOM,
    inboxMaxAgeMs: c.PARLEY_INBOX_MAX_AGE_MS,
    inboxMaxBytes: c.PARLEY_INBOX_MAX_BYTES,
    inboxMaxMsgsPerSubject: c.PARLEY_INBOX_MAX_MSGS_PER_ROOM,
  };
}

/** Splits a comma-separated server list. */
export function serverList(value: string): string[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}
