/**
 * `parley-bridge`: one bridge per process (as in Kubernetes). config → logger → telemetry → the
 * bridge agent's connection → the source adapter → /healthz, /readyz, /metrics and the webhooks on
 * HTTP_PORT; SIGTERM stops the source, drains, flushes telemetry.
 */
import { createLogger, serverList, startTelemetry } from '@parley/kit';
import { type BridgeConfig, loadConfig } from './config.js';
import { attachDatabricks } from './databricks/index.js';
import { startBridge } from './runtime.js';
import { attachSalesforce } from './salesforce/index.js';
import { attachSap } from './sap/index.js';

let config: BridgeConfig;
try {
  config = loadConfig();
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exit(2);
}
const name = `bridge-${config.PARLEY_BRIDGE}`;
const log = createLogger({ name: `parley-${name}`, level: config.LOG_LEVEL });
const telemetry = await startTelemetry({ config, serviceName: `parley-${name}`, primaryService: name, log });
const running = await startBridge({
  servers: serverList(config.NATS_URL),
  creds: config.NATS_CREDS,
  mapping: config.PARLEY_BRIDGE_MAPPING,
  stateDir: config.PARLEY_BRIDGE_STATE_DIR,
  log,
  tracer: telemetry.tracer(name),
});
let stopSource: () => Promise<void> = async () => undefined;
if (config.PARLEY_BRIDGE === 'salesforce') {
  const source = attachSalesforce(running.bridge, {
    loginUrl: config.SALESFORCE_LOGIN_URL as string,
    clientId: config.SALESFORCE_CLIENT_ID as string,
    clientSecret: config.SALESFORCE_CLIENT_SECRET as string,
    tenantId: config.SALESFORCE_TENANT_ID,
    endpoint: config.SALESFORCE_PUBSUB_ENDPOINT,
    insecure: config.SALESFORCE_PUBSUB_INSECURE,
    topics: config.SALESFORCE_TOPICS,
    managed: config.SALESFORCE_MANAGED_SUBSCRIPTIONS,
    startAt: config.SALESFORCE_START_AT,
    batch: config.SALESFORCE_BATCH,
    ...(config.SALESFORCE_PUBLISH_AS ? { publishAs: config.SALESFORCE_PUBLISH_AS } : {}),
  });
  stopSource = () => source.stop();
} else if (config.PARLEY_BRIDGE === 'sap') {
  attachSap(running.bridge, running.app, {
    path: config.SAP_WEBHOOK_PATH,
    jwksUrl: config.SAP_WEBHOOK_JWKS_URL as string,
    issuer: config.SAP_WEBHOOK_ISSUER as string,
    audience: config.SAP_WEBHOOK_AUDIENCE as string,
    allowedOrigins: config.SAP_WEBHOOK_ALLOWED_ORIGINS,
    ...(config.SAP_ODATA_URL &&
    config.SAP_ODATA_TOKEN_URL &&
    config.SAP_ODATA_CLIENT_ID &&
    config.SAP_ODATA_CLIENT_SECRET
      ? {
          odata: {
            baseUrl: config.SAP_ODATA_URL,
            tokenUrl: config.SAP_ODATA_TOKEN_URL,
            clientId: config.SAP_ODATA_CLIENT_ID,
            clientSecret: config.SAP_ODATA_CLIENT_SECRET,
          },
        }
      : {}),
  });
} else {
  attachDatabricks(running.bridge, running.app, {
    path: config.DATABRICKS_WEBHOOK_PATH,
    webhookUser: config.DATABRICKS_WEBHOOK_USER as string,
    webhookPassword: config.DATABRICKS_WEBHOOK_PASSWORD as string,
    ...(config.DATABRICKS_HOST
      ? {
          jobs: {
            host: config.DATABRICKS_HOST,
            ...(config.DATABRICKS_TOKEN ? { token: config.DATABRICKS_TOKEN } : {}),
            ...(config.DATABRICKS_CLIENT_ID ? { clientId: config.DATABRICKS_CLIENT_ID } : {}),
            ...(config.DATABRICKS_CLIENT_SECRET ? { clientSecret: config.DATABRICKS_CLIENT_SECRET } : {}),
            ...(config.DATABRICKS_CLUSTER_ID ? { existingClusterId: config.DATABRICKS_CLUSTER_ID } : {}),
            pollMs: config.DATABRICKS_POLL_MS,
          },
        }
      : {}),
  });
}
await running.bridge.start();
await running.app.listen({ host: config.HTTP_HOST, port: config.HTTP_PORT });
log.info(
  { bridge: config.PARLEY_BRIDGE, id: running.bridge.id, http: `${config.HTTP_HOST}:${config.HTTP_PORT}` },
  `parley-${name} started`,
);

let stopping = false;
const stop = async (signal: string) => {
  if (stopping) return;
  stopping = true;
  log.info({ signal }, 'stopping');
  await stopSource();
  await running.stop();
  await telemetry.shutdown();
  process.exit(0);
};
process.once('SIGTERM', () => void stop('SIGTERM'));
process.once('SIGINT', () => void stop('SIGINT'));
