#!/usr/bin/env node
/** `npm start`: the local Parley backbone. Run with --help for the flags. */
import { relative } from 'node:path';
import { createLogger } from '@parley/kit';
import { Command, InvalidArgumentError } from 'commander';
import { loadConfig } from './config.js';
import { startDemo } from './demo.js';
import { StartupError, startStandalone } from './standalone.js';

const port = (flag: string) => (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 65535)
    throw new InvalidArgumentError(`${flag} must be a port number (1-65535)`);
  return n;
};

let config: ReturnType<typeof loadConfig>;
try {
  config = loadConfig();
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exit(2);
}

const program = new Command('parley-standalone')
  .description('Start the local Parley backbone: nats-server (JetStream, operator mode) and every service.')
  .option('--nats-port <port>', 'NATS client port', port('--nats-port'), config.PARLEY_NATS_PORT)
  .option('--http-port <port>', 'port of /healthz and /readyz', port('--http-port'), config.PARLEY_HTTP_PORT)
  .option('--home <dir>', 'state directory (keys, NATS data, creds)', config.PARLEY_HOME)
  .option('--no-demo', 'do not run the scripted demo conversation')
  .showHelpAfterError();
program.parse();
const opts = program.opts<{ natsPort: number; httpPort: number; home: string; demo: boolean }>();

const log = createLogger({ name: 'parley', level: config.LOG_LEVEL, destination: process.stderr });
const out = (line = '') => process.stdout.write(`${line}\n`);
const started = Date.now();
let standalone: Awaited<ReturnType<typeof startStandalone>>;
try {
  standalone = await startStandalone({
    home: opts.home,
    natsPort: opts.natsPort,
    httpPort: opts.httpPort,
    log,
    telemetry: config,
    rooms: config.rooms,
    ...(config.NATS_SERVER_BIN ? { natsServerBin: config.NATS_SERVER_BIN } : {}),
  });
} catch (err) {
  if (err instanceof StartupError) {
    process.stderr.write(`parley: ${err.message}\n`);
    process.exit(1);
  }
  throw err;
}
const { home } = standalone;
const rel = (p: string) => {
  const r = relative(process.cwd(), p);
  return r.startsWith('..') ? p : r;
};
out(`Parley is running (ready in ${((Date.now() - started) / 1000).toFixed(1)} s).`);
out();
out(`  NATS (JetStream, operator mode)  ${standalone.natsUrl}   log: ${rel(home.paths.natsLog)}`);
out(
  `  health                           ${standalone.httpUrl}/healthz   metrics: ${standalone.httpUrl}/metrics`,
);
if (standalone.telemetry?.exportTo) {
  out(`  traces                           ${standalone.telemetry.exportTo}`);
}
out(`  services                         ${standalone.services.map((s) => s.name).join(', ')}`);
out(`  HTTP API (gateway)               ${standalone.httpUrl}/v1   reference: ${standalone.httpUrl}/docs`);
out(`  console                          ${standalone.httpUrl}/   (sign in with the login link below)`);
out(
  `  login link (once, 15 min)        ${standalone.httpUrl}/v1/login?code=${await standalone.gateway.createLoginCode(home.state.admin.id)}`,
);
out(
  `  state                            ${rel(home.paths.home)} (${home.firstRun ? 'new keys generated' : 'keys reused'})`,
);
out(
  `  admin creds                      ${rel(home.paths.adminCreds)}  (${home.state.admin.id}, org ${home.state.org.id})`,
);
out();
let demo: Awaited<ReturnType<typeof startDemo>> | undefined;
// Signals are handled from here on: the demo may still be running when Ctrl-C comes.
let stopping = false;
const shutdown = async (signal: string) => {
  if (stopping) return;
  stopping = true;
  out(`\n${signal}: stopping services, draining NATS connections, stopping nats-server…`);
  await demo?.stop();
  await standalone.stop();
  out('stopped.');
  process.exit(0);
};
process.on('SIGINT', () => void shutdown('SIGINT'));
process.on('SIGTERM', () => void shutdown('SIGTERM'));
if (opts.demo) {
  const telemetry = standalone.telemetry;
  demo = await startDemo({
    natsUrl: standalone.natsUrl,
    home,
    out,
    ...(telemetry?.mode === 'export' ? { tracer: (agent: string) => telemetry.tracer(agent) } : {}),
  });
  await Promise.race([demo.finished, new Promise((r) => setTimeout(r, 10_000))]);
  out();
}
out('Try, in another terminal:');
out(`  curl ${standalone.httpUrl}/healthz`);
out('  npx parley whoami                       # you are the local admin');
if (demo) {
  out('  npx parley tail --count 6               # the demo conversation, from your inbox');
  out(`  npx parley contact list --as ${rel(home.paths.credsDir)}/auditor.creds  # the demo's consent step`);
  out('  npx parley usage --by room              # what the demo agents reported, by room');
}
out('  npx parley room create "my room" --json  # then: npx parley send <room> hello');
out();
out('Ctrl-C stops everything; the next start reuses the keys and data.');
