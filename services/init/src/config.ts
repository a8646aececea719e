import { commonEnv, envPort, loadEnv, retentionEnv } from '@parley/kit';
import * as z from 'zod';

/** The init step's environment (Kubernetes Job / init container, or a compose one-shot container). */
export const InitEnv = z.object({
  NATS_URL: commonEnv.NATS_URL,
  NATS_CREDS: commonEnv.NATS_CREDS,
  LOG_LEVEL: commonEnv.LOG_LEVEL,
  PARLEY_REPLICAS: commonEnv.PARLEY_REPLICAS,
  PARLEY_PARTITIONS: commonEnv.PARLEY_PARTITIONS,
  PARLEY_INBOX_CONSUMER_REPLICAS: z.coerce
    .number()
    .int()
    .min(1)
    .max(5)
    .default(1)
    .describe(
      'Replicas of each participant’s inbox consumer. R1 even on R3 streams: every R3 consumer is a Raft group. @default 1',
    ),
  PARLEY_SECRET_STORE: z
    .enum(['dir', 'kubernetes'])
    .default('dir')
    .describe(
      'Where `keys` keeps the key material: `dir` (files in PARLEY_SECRETS_DIR) or `kubernetes` (one Secret). @default dir',
    ),
  PARLEY_SECRETS_DIR: z
    .string()
    .default('/parley/secrets')
    .describe('Directory of the key material when PARLEY_SECRET_STORE=dir. @default /parley/secrets'),
  PARLEY_SECRET_NAME: z
    .string()
    .regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, { message: 'must be a Kubernetes object name' })
    .default('parley-keys')
    .describe('Name of the Secret when PARLEY_SECRET_STORE=kubernetes. @default parley-keys'),
  PARLEY_SECRET_NAMESPACE: z
    .string()
    .optional()
    .describe('Namespace of the Secret. @default the namespace of the pod’s service account'),
  KUBERNETES_SERVICE_HOST: z
    .string()
    .optional()
    .describe('Kubernetes API host; set by the kubelet in every pod.'),
  KUBERNETES_SERVICE_PORT: envPort
    .default(443)
    .describe('Kubernetes API port; set by the kubelet in every pod. @default 443'),
  PARLEY_SERVICES: z
    .string()
    .regex(/^[a-z][a-z0-9-]*(,[a-z][a-z0-9-]*)*$/, { message: 'must be a comma-separated list of names' })
    .default('init,rooms,registry,governance,consent,mcp,gateway')
    .describe('Services to mint NATS creds for. @default init,rooms,registry,governance,consent,mcp,gateway'),
  PARLEY_OPERATOR_NAME: z
    .string()
    .default('parley')
    .describe('Name of the NATS operator created on first run. @default parley'),
  PARLEY_ORG_NAME: z
    .string()
    .default('default')
    .describe('Name of the first organisation created on first run. @default default'),
  PARLEY_STATE_FILE: z
    .string()
    .optional()
    .describe('state.json of the key material (org and admin ids); `backbone` seeds them when set.'),
  PARLEY_NATS_WAIT_MS: z.coerce
    .number()
    .int()
    .min(0)
    .default(300_000)
    .describe('How long `backbone` waits for NATS and JetStream to be available. @default 300000'),
  ...retentionEnv,
});

/** The init step's configuration. */
export type InitConfig = z.output<typeof InitEnv>;

/** Reads and validates the configuration from the environment. */
export function loadConfig(env: Record<string, string | undefined> = process.env): InitConfig {
  return loadEnv('init', InitEnv, env);
}
