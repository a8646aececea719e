import { readFile } from 'node:fs/promises';
import { type Logger, retentionOptions, serverList } from '@parley/kit';
import { setUpBackbone } from './backbone.js';
import { type InitConfig, loadConfig } from './config.js';
import { ensureKeys } from './keys.js';
import { inClusterStore } from './kubernetes.js';
import { DeploymentState } from './layout.js';
import { createDirSecretStore, type SecretStore } from './secret-store.js';

/** The steps `parley-init` runs. */
export const initCommands = {
  keys: 'create or complete the key material (operator, accounts, signing keys, creds, NATS auth include)',
  backbone: 'wait for NATS, create or update the streams and buckets, seed the first org and admin',
} as const;
export type InitCommand = keyof typeof initCommands;

/** The store the configuration names. */
export async function secretStoreFor(config: InitConfig): Promise<SecretStore> {
  if (config.PARLEY_SECRET_STORE === 'dir') return createDirSecretStore(config.PARLEY_SECRETS_DIR);
  if (!config.KUBERNETES_SERVICE_HOST) {
    throw new Error('PARLEY_SECRET_STORE=kubernetes needs KUBERNETES_SERVICE_HOST (it runs in a pod)');
  }
  return inClusterStore({
    name: config.PARLEY_SECRET_NAME,
    host: config.KUBERNETES_SERVICE_HOST,
    port: config.KUBERNETES_SERVICE_PORT,
    labels: { 'app.kubernetes.io/part-of': 'parley', 'app.kubernetes.io/component': 'keys' },
    ...(config.PARLEY_SECRET_NAMESPACE ? { namespace: config.PARLEY_SECRET_NAMESPACE } : {}),
  });
}

async function readState(path: string, log: Logger): Promise<DeploymentState | undefined> {
  try {
    return DeploymentState.parse(JSON.parse(await readFile(path, 'utf8')));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      log.warn({ path }, 'no state file: the first org and admin are not seeded');
      return undefined;
    }
    throw err;
  }
}

/** Runs one step with a validated configuration. */
export async function runInit(
  command: InitCommand,
  config: InitConfig,
  log: Logger,
  store?: SecretStore,
): Promise<void> {
  if (command === 'keys') {
    const result = await ensureKeys(store ?? (await secretStoreFor(config)), {
      services: config.PARLEY_SERVICES.split(','),
      operatorName: config.PARLEY_OPERATOR_NAME,
      orgName: config.PARLEY_ORG_NAME,
      ...(config.PARLEY_SECRET_STORE === 'dir' ? { mountDir: config.PARLEY_SECRETS_DIR } : {}),
      log,
    });
    log.info({ action: result.action, written: result.written }, 'keys ready');
    return;
  }
  const state = config.PARLEY_STATE_FILE ? await readState(config.PARLEY_STATE_FILE, log) : undefined;
  const result = await setUpBackbone({
    servers: serverList(config.NATS_URL),
    ...(config.NATS_CREDS ? { creds: config.NATS_CREDS } : {}),
    backbone: {
      replicas: config.PARLEY_REPLICAS,
      partitions: config.PARLEY_PARTITIONS,
      inboxConsumerReplicas: config.PARLEY_INBOX_CONSUMER_REPLICAS,
      ...retentionOptions(config),
    },
    ...(state ? { state } : {}),
    waitMs: config.PARLEY_NATS_WAIT_MS,
    log,
  });
  log.info(
    { streams: result.report.streams, buckets: result.report.buckets.length, seeded: result.seeded },
    `backbone ready (waited ${result.waitedMs} ms for NATS)`,
  );
}

/** Parses `argv` (without node and the script) and the environment; throws a usage message. */
export function parseInit(
  argv: string[],
  env: Record<string, string | undefined>,
): { command: InitCommand; config: InitConfig } {
  const command = argv[0];
  if (argv.length !== 1 || !command || !(command in initCommands)) {
    const lines = Object.entries(initCommands).map(([c, what]) => `  ${c.padEnd(9)} ${what}`);
    throw new UsageError(`usage: parley-init <command>\n${lines.join('\n')}`);
  }
  return { command: command as InitCommand, config: loadConfig(env) };
}

/** A wrong command line. */
export class UsageError extends Error {
  override name = 'UsageError';
}
