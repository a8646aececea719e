/**
 * The environment of a bridge process (`parley-bridge`): which bridge, its creds, mapping and
 * state, and the settings of its source system. Secrets (client secrets, tokens, passwords) come
 * from the environment only — in Kubernetes from a Secret — never from the mapping file.
 */
import { envBoolean, envPort, loadEnv, telemetryEnv } from '@parley/kit';
import * as z from 'zod';

const list = z.string().transform((s) =>
  s
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean),
);

/** The bridge process's environment. */
export const BridgeEnv = z.object({
  ...telemetryEnv,
  PARLEY_BRIDGE: z.enum(['salesforce', 'sap', 'databricks']).describe('Which bridge this process runs.'),
  NATS_URL: z
    .string()
    .default('nats://127.0.0.1:4222')
    .describe('Comma-separated NATS server URLs. @default nats://127.0.0.1:4222'),
  NATS_CREDS: z.string().describe('The bridge agent’s creds file (`parley agent create --runtime bridge`).'),
  PARLEY_BRIDGE_MAPPING: z.string().describe('Path of the mapping YAML (see docs/bridges.md).'),
  PARLEY_BRIDGE_STATE_DIR: z
    .string()
    .default('/var/lib/parley-bridge')
    .describe(
      'Directory of the cursor, case rooms and dead letters (a persistent volume). @default /var/lib/parley-bridge',
    ),
  LOG_LEVEL: z
    .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])
    .default('info')
    .describe('pino level. @default info'),
  HTTP_HOST: z
    .string()
    .default('0.0.0.0')
    .describe('Address of /healthz, /readyz, /metrics and the webhooks. @default 0.0.0.0'),
  HTTP_PORT: envPort
    .default(8080)
    .describe('Port of /healthz, /readyz, /metrics and the webhooks. @default 8080'),

  SALESFORCE_LOGIN_URL: z
    .string()
    .url()
    .optional()
    .describe('The org’s My Domain URL (token endpoint /services/oauth2/token).'),
  SALESFORCE_CLIENT_ID: z
    .string()
    .optional()
    .describe('Connected app consumer key (client credentials flow).'),
  SALESFORCE_CLIENT_SECRET: z.string().optional().describe('Connected app consumer secret.'),
  SALESFORCE_TENANT_ID: z
    .string()
    .optional()
    .describe('The org id; read from the token response when unset.'),
  SALESFORCE_PUBSUB_ENDPOINT: z
    .string()
    .default('api.pubsub.salesforce.com:7443')
    .describe('host:port of the Pub/Sub API. @default api.pubsub.salesforce.com:7443'),
  SALESFORCE_PUBSUB_INSECURE: envBoolean
    .default(false)
    .describe('Plaintext gRPC (local test servers only). @default false'),
  SALESFORCE_TOPICS: list
    .default([])
    .describe('Comma-separated topics, e.g. /data/AccountChangeEvent,/event/Order__e.'),
  SALESFORCE_MANAGED_SUBSCRIPTIONS: list
    .pipe(
      z.array(
        z
          .string()
          .regex(
            /^[A-Za-z][\w]*=\/[\w/]+$/,
            'DeveloperName=/topic, e.g. Parley_Accounts=/data/AccountChangeEvent',
          )
          .transform((s) => {
            const [name, topic] = s.split('=') as [string, string];
            return { name, topic };
          }),
      ),
    )
    .default([])
    .describe(
      'Comma-separated managed subscriptions (ManagedSubscribe, open beta at Salesforce; the server keeps the committed replay id), each DeveloperName=/topic of its ManagedEventSubscription record.',
    ),
  SALESFORCE_START_AT: z
    .enum(['LATEST', 'EARLIEST'])
    .default('LATEST')
    .describe('Where a topic without a cursor starts. @default LATEST'),
  SALESFORCE_BATCH: z.coerce
    .number()
    .int()
    .min(1)
    .max(1000)
    .default(100)
    .describe('num_requested window. @default 100'),
  SALESFORCE_PUBLISH_AS: z.string().optional().describe('CreatedById of published Platform Events.'),

  SAP_WEBHOOK_PATH: z
    .string()
    .default('/sap/events')
    .describe('Path Event Mesh pushes to. @default /sap/events'),
  SAP_WEBHOOK_JWKS_URL: z
    .string()
    .url()
    .optional()
    .describe('JWKS of the token issuer Event Mesh uses (XSUAA …/token_keys).'),
  SAP_WEBHOOK_ISSUER: z.string().optional().describe('Expected `iss` of webhook tokens.'),
  SAP_WEBHOOK_AUDIENCE: z.string().optional().describe('Expected `aud` of webhook tokens.'),
  SAP_WEBHOOK_ALLOWED_ORIGINS: list
    .default(['*'])
    .describe('Origins granted in the webhook handshake. @default *'),
  SAP_ODATA_URL: z.string().url().optional().describe('Base URL of the S/4HANA system (OData APIs).'),
  SAP_ODATA_TOKEN_URL: z.string().url().optional().describe('OAuth token URL for the OData APIs.'),
  SAP_ODATA_CLIENT_ID: z.string().optional(),
  SAP_ODATA_CLIENT_SECRET: z.string().optional(),

  DATABRICKS_WEBHOOK_PATH: z
    .string()
    .default('/databricks/notifications')
    .describe('@default /databricks/notifications'),
  DATABRICKS_WEBHOOK_USER: z
    .string()
    .optional()
    .describe('Username of the notification destination (Basic).'),
  DATABRICKS_WEBHOOK_PASSWORD: z
    .string()
    .optional()
    .describe('Password of the notification destination (Basic).'),
  DATABRICKS_HOST: z.string().url().optional().describe('Workspace URL, for the Jobs API.'),
  DATABRICKS_TOKEN: z
    .string()
    .optional()
    .describe('A personal access token (or use the OAuth client below).'),
  DATABRICKS_CLIENT_ID: z.string().optional().describe('Service principal OAuth client id (M2M).'),
  DATABRICKS_CLIENT_SECRET: z.string().optional(),
  DATABRICKS_CLUSTER_ID: z.string().optional().describe('existing_cluster_id of submitted runs.'),
  DATABRICKS_POLL_MS: z.coerce
    .number()
    .int()
    .min(10)
    .default(2000)
    .describe('Between two runs/get. @default 2000'),
});

/** The bridge process's configuration. */
export type BridgeConfig = z.output<typeof BridgeEnv>;

/** Reads the environment; the settings the chosen bridge needs are required. */
export function loadConfig(env: Record<string, string | undefined> = process.env): BridgeConfig {
  const c = loadEnv('bridge', BridgeEnv, env);
  const need = (keys: (keyof BridgeConfig)[]) =>
    keys.filter((k) => c[k] === undefined).map((k) => `${k}: required for PARLEY_BRIDGE=${c.PARLEY_BRIDGE}`);
  const missing =
    c.PARLEY_BRIDGE === 'salesforce'
      ? [
          ...need(['SALESFORCE_LOGIN_URL', 'SALESFORCE_CLIENT_ID', 'SALESFORCE_CLIENT_SECRET']),
          ...(c.SALESFORCE_TOPICS.length || c.SALESFORCE_MANAGED_SUBSCRIPTIONS.length
            ? []
            : ['SALESFORCE_TOPICS: at least one topic (or SALESFORCE_MANAGED_SUBSCRIPTIONS)']),
        ]
      : c.PARLEY_BRIDGE === 'sap'
        ? need(['SAP_WEBHOOK_JWKS_URL', 'SAP_WEBHOOK_ISSUER', 'SAP_WEBHOOK_AUDIENCE'])
        : [
            ...need(['DATABRICKS_WEBHOOK_USER', 'DATABRICKS_WEBHOOK_PASSWORD']),
            ...(c.DATABRICKS_HOST &&
            !c.DATABRICKS_TOKEN &&
            !(c.DATABRICKS_CLIENT_ID && c.DATABRICKS_CLIENT_SECRET)
              ? [
                  'DATABRICKS_TOKEN or DATABRICKS_CLIENT_ID + DATABRICKS_CLIENT_SECRET: required with DATABRICKS_HOST',
                ]
              : []),
          ];
  if (missing.length)
    throw new Error(`invalid configuration for bridge:\n${missing.map((m) => `  - ${m}`).join('\n')}`);
  return c;
}
