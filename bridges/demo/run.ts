/**
 * `pnpm demo:enterprise`: a whole local Parley (nats-server + every service, in a temporary home
 * unless PARLEY_HOME is set), the local Salesforce, SAP and Databricks, the three bridges, and the
 * enterprise case from a Salesforce Account change to an approved credit hold. With
 * OTEL_EXPORTER_OTLP_ENDPOINT set (e.g. Jaeger's OTLP port) the case is exported as one trace.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, loadTelemetryConfig } from '@parley/kit';
import { freePort, startStandalone } from '@parley/standalone';
import { runEnterpriseDemo } from '../src/demo/enterprise.js';

const out = (line: string) => process.stdout.write(`${line}\n`);
const temporary = !process.env.PARLEY_HOME;
const home = process.env.PARLEY_HOME ?? (await mkdtemp(join(tmpdir(), 'parley-enterprise-')));
const log = createLogger({ name: 'parley-enterprise-demo', level: process.env.LOG_LEVEL ?? 'warn' });
const telemetry = loadTelemetryConfig(process.env);
const parley = await startStandalone({
  home,
  natsPort: await freePort(),
  httpPort: await freePort(),
  log,
  telemetry,
});
out(`parley  backbone at ${parley.natsUrl} (home ${home})`);
let code = 0;
try {
  const demo = await runEnterpriseDemo({
    natsUrl: parley.natsUrl,
    adminCreds: parley.home.paths.adminCreds,
    org: parley.home.state.org.id,
    stateDir: join(home, 'bridges'),
    out,
    log,
  });
  const timeout = setTimeout(() => {
    out('enterprise  the case did not finish within 60 s');
    process.exit(1);
  }, 60_000);
  const { room, published } = await demo.finished;
  clearTimeout(timeout);
  out(`enterprise  Salesforce ← Credit_Hold__e ${JSON.stringify(published)}`);
  const history = await demo.maria.rooms.room(room).history({ order: 'oldest', limit: 200 });
  const said = history.entries.filter((e) => e.message.kind === 'message' || e.message.kind === 'status');
  const inTrace = said.filter((e) => e.message.trace?.traceparent.split('-')[1] === demo.traceId).length;
  out(`enterprise  case room ${room}: ${inTrace} of ${said.length} messages in trace ${demo.traceId}`);
  if (telemetry.OTEL_EXPORTER_OTLP_ENDPOINT)
    out(`enterprise  traces exported to ${telemetry.OTEL_EXPORTER_OTLP_ENDPOINT}`);
  await demo.stop();
} catch (err) {
  process.stderr.write(`${(err as Error).stack ?? err}\n`);
  code = 1;
} finally {
  await parley.stop();
  if (temporary) await rm(home, { recursive: true, force: true });
}
process.exit(code);
