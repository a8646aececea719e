import { resolve } from 'node:path';
import { commonEnv, envPort, loadEnv, retentionEnv, telemetryEnv } from '@parley/kit';
import { type RoomsConfig, RoomsEnv } from '@parley/rooms';
import * as z from 'zod';

/** The rooms service's send-guard settings, read from the same variables as a rooms process. */
const RoomsGuardEnv = RoomsEnv.pick({
  PARLEY_HOP_LIMIT: true,
  PARLEY_SEND_GUARDS: true,
  PARLEY_RATE_AGENT_PER_SEC: true,
  PARLEY_RATE_AGENT_BURST: true,
  PARLEY_RATE_ROOM_PER_SEC: true,
  PARLEY_RATE_ROOM_BURST: true,
  PARLEY_RUNAWAY_MESSAGES: true,
  PARLEY_RUNAWAY_WINDOW_MS: true,
});

/** The standalone backbone's environment (flags override it). */
export const StandaloneEnv = z.object({
  PARLEY_HOME: z.string().optional().describe('State directory: keys, NATS data, creds. @default ./.parley'),
  NATS_SERVER_BIN: z.string().optional().describe('nats-server binary. @default found on PATH'),
  PARLEY_NATS_PORT: envPort.default(4222).describe('NATS client port. @default 4222'),
  PARLEY_NATS_WS_PORT: envPort
    .default(7422)
    .describe('Port of the NATS WebSocket listener on the same interface (0 = none). @default 7422'),
  PARLEY_HTTP_PORT: envPort.default(7420).describe('Port of /healthz, /readyz and /metrics. @default 7420'),
  PARLEY_STOP_TIMEOUT_MS: commonEnv.PARLEY_STOP_TIMEOUT_MS.describe(
    'How long a stop (Ctrl-C, SIGTERM) may take before it gives up on what is left, stops nats-server regardless and exits 1. @default 20000',
  ),
  PARLEY_STARTED_AT_MS: z.coerce
    .number()
    .int()
    .optional()
    .describe(
      'Set by npm start (scripts/start.mjs): when the command began (Unix ms), so the banner reports the time from the command to healthy.',
    ),
  LOG_LEVEL: z
    .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])
    .default('warn')
    .describe('Log level of the services (logs go to stderr). @default warn'),
  ...retentionEnv,
  ...telemetryEnv,
});

/** The standalone configuration. */
export type StandaloneConfig = z.output<typeof StandaloneEnv> & {
  PARLEY_HOME: string;
  /** Rooms settings from the environment: the send guards (see docs/operations.md). */
  rooms: Partial<RoomsConfig>;
};

/** Reads the environment; `cwd` anchors the default home. */
export function loadConfig(
  env: Record<string, string | undefined> = process.env,
  cwd = process.cwd(),
): StandaloneConfig {
  const c = loadEnv('standalone', StandaloneEnv, env);
  const rooms = loadEnv('standalone', RoomsGuardEnv, env);
  return { ...c, PARLEY_HOME: resolve(cwd, c.PARLEY_HOME ?? '.parley'), rooms };
}
