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
  PARLEY_FANOUT_STUCK_MS: z.coerce
    .number()
    .int()
    .min(1_000)
    .max(3_600_000)
    .default(30_000)
    .describe(
      'A fan-out partition whose worker has had no working subscription this long is stuck: /healthz fails (check fanout) while the backbone answers the replica, and the partition is handed off to another live replica. @default 30000',
    ),
  PARLEY_FANOUT_CONNECTIONS: z.coerce
    .number()
    .int()
    .min(0)
    .max(16)
    .default(2)
    .describe(
      'NATS connections of the fan-out, apart from the ingress (partitions spread over them); 0 = share the service connection. @default 2',
    ),
  PARLEY_INBOX_FLOORS_MS: z.coerce
    .number()
    .int()
    .min(0)
    .max(3_600_000)
    .default(10_000)
    .describe(
      'How often the replica holding fan-out partition k records the acknowledgement floors of inbox shard k (one consumer list per shard) in parley_floors; an inbox consumer whose state nats-server lost (before 2.11.11) goes on after its recorded floor when its agent attaches. 0 = not recorded. @default 10000',
    ),
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
  PARLEY_SEND_GUARDS: envBoolean
    .default(true)
    .describe(
      'Run the send guards (paused rooms, rate limits, delegation tokens). false is for benchmarks and debugging only: tokens are then not verified nor stamped. @default true',
    ),
  PARLEY_RATE_AGENT_PER_SEC: z.coerce
    .number()
    .min(0)
    .max(1_000_000)
    .default(20)
    .describe(
      'Messages per second an agent may send, over all ingress replicas (token bucket); 0 = no limit. @default 20',
    ),
  PARLEY_RATE_AGENT_BURST: z.coerce
    .number()
    .min(1)
    .max(1_000_000)
    .default(40)
    .describe('Messages an agent may send at once before its rate applies. @default 40'),
  PARLEY_RATE_ROOM_PER_SEC: z.coerce
    .number()
    .min(0)
    .max(1_000_000)
    .default(100)
    .describe('Messages per second a room accepts from everyone together; 0 = no limit. @default 100'),
  PARLEY_RATE_ROOM_BURST: z.coerce
    .number()
    .min(1)
    .max(1_000_000)
    .default(200)
    .describe('Messages a room accepts at once before its rate applies. @default 200'),
  PARLEY_RUNAWAY_MESSAGES: z.coerce
    .number()
    .int()
    .min(0)
    .max(1_000_000)
    .default(100)
    .describe(
      'Runaway detector: more than this many agent messages in a room within PARLEY_RUNAWAY_WINDOW_MS, with no human message, pauses the room for agents; 0 = off. @default 100',
    ),
  PARLEY_RUNAWAY_WINDOW_MS: z.coerce
    .number()
    .int()
    .min(1_000)
    .max(86_400_000)
    .default(600_000)
    .describe('Runaway detector window. @default 600000 (10 minutes)'),
  PARLEY_TASKS: envBoolean
    .default(true)
    .describe(
      'Serve the tasks API (tasks.*) and watch task deadlines and leases in this replica. @default true',
    ),
  PARLEY_TASK_SWEEP_MS: z.coerce
    .number()
    .int()
    .min(50)
    .max(60_000)
    .default(500)
    .describe(
      'How often open tasks are checked for a passed deadline (fails them with DEADLINE_EXCEEDED) or a passed lease. @default 500',
    ),
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
