#!/usr/bin/env node
/** `npm start`: the local Parley backbone. Run with --help for the flags. */
import { rm } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { describeServer, isParleyError } from '@parley/contracts';
import { createLogger, retentionOptions } from '@parley/kit';
import { Command, InvalidArgumentError, Option } from 'commander';
import { loadConfig } from './config.js';
import { startDemo } from './demo.js';
import { StartupError, StopTimeoutError, startStandalone } from './standalone.js';

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
  .option(
    '--nats-ws-port <port>',
    'NATS WebSocket port (remote clients: --server ws://…)',
    port('--nats-ws-port'),
    config.PARLEY_NATS_WS_PORT,
  )
  .option('--home <dir>', 'state directory (keys, NATS data, creds)', config.PARLEY_HOME)
  .addOption(
    new Option(
      '--demo <name>',
      'which demo runs: conversation (planner, reviewer, auditor) or enterprise (the Salesforce, SAP and Databricks bridges on one case)',
    )
      .choices(['conversation', 'enterprise'])
      .default('conversation'),
  )
  .option('--no-demo', 'do not run a demo')
  .showHelpAfterError();
program.parse();
const opts = program.opts<{
  natsPort: number;
  httpPort: number;
  natsWsPort: number;
  home: string;
  demo: 'conversation' | 'enterprise' | false;
}>();

const log = createLogger({ name: 'parley', level: config.LOG_LEVEL, destination: process.stderr });
const out = (line = '') => process.stdout.write(`${line}\n`);
const started = Date.now();
let standalone: Awaited<ReturnType<typeof startStandalone>>;
try {
  standalone = await startStandalone({
    home: opts.home,
    natsPort: opts.natsPort,
    httpPort: opts.httpPort,
    ...(opts.natsWsPort ? { natsWsPort: opts.natsWsPort } : {}),
    log,
    telemetry: config,
    rooms: config.rooms,
    backbone: retentionOptions(config),
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

let demo: Awaited<ReturnType<typeof startDemo>> | undefined;
// The enterprise demo (--demo enterprise): its local systems and bridges run until the stop.
let enterprise: { stop(): Promise<void> } | undefined;
let enterpriseTry: string[] = [];
// Signals are handled from here on: the demo may still be running when Ctrl-C comes. The first
// stops in order within PARLEY_STOP_TIMEOUT_MS; a second one (or the deadline) does not wait.
let stopping = false;
const shutdown = async (why: string, code = 0) => {
  if (stopping) {
    out(
      `${why === 'error' ? 'an error during the stop' : `second signal (${why})`}: not waiting any longer; nats-server gets 2 s to stop, then is killed.`,
    );
    // SIGTERM first: a SIGKILLed nats-server can lose its last JetStream writes.
    await standalone.nats?.stop(2000);
    process.exit(1);
  }
  stopping = true;
  out(
    `\n${why}: stopping services, draining NATS connections, stopping nats-server… (a second Ctrl-C forces it)`,
  );
  try {
    // The demo agents' connections drain on the same server (none to drain when it is gone):
    // bounded, like the rest of the stop.
    if (standalone.nats?.running !== false) {
      await Promise.race([
        Promise.all([demo?.stop(), enterprise?.stop()]),
        new Promise((r) => setTimeout(r, 3000).unref()),
      ]);
    }
    await standalone.stop({ deadlineMs: config.PARLEY_STOP_TIMEOUT_MS });
  } catch (err) {
    process.stderr.write(`parley: ${err instanceof StopTimeoutError ? err.message : (err as Error).stack}\n`);
    process.exit(1);
  }
  out('stopped.');
  process.exit(code);
};
process.on('SIGINT', () => void shutdown('SIGINT'));
process.on('SIGTERM', () => void shutdown('SIGTERM'));
// An error nothing caught must not leave nats-server running (nor a backbone half up): stop, exit 1.
const crash = (err: unknown) => {
  process.stderr.write(`parley: unexpected error, stopping: ${(err as Error)?.stack ?? String(err)}\n`);
  void shutdown('error', 1);
};
process.on('uncaughtException', crash);
process.on('unhandledRejection', crash);

const since = config.PARLEY_STARTED_AT_MS;
out(
  `Parley is running (ready in ${((Date.now() - started) / 1000).toFixed(1)} s${since ? `; ${((Date.now() - since) / 1000).toFixed(1)} s since npm start` : ''}).`,
);
out();
out(`  NATS (JetStream, operator mode)  ${standalone.natsUrl}   log: ${rel(home.paths.natsLog)}`);
// The server version and the known defects that apply to it, with what Parley does (parley doctor).
out(`  server                           ${describeServer(standalone.natsVersion)}`);
out(
  `  health                           ${standalone.httpUrl}/healthz   metrics: ${standalone.httpUrl}/metrics`,
);
if (standalone.telemetry?.exportTo) {
  out(`  traces                           ${standalone.telemetry.exportTo}`);
}
out(`  services                         ${standalone.services.map((s) => s.name).join(', ')}`);
if (standalone.natsWsUrl) out(`  NATS WebSocket (remote clients)  ${standalone.natsWsUrl}`);
out(`  HTTP API (gateway)               ${standalone.httpUrl}/v1   reference: ${standalone.httpUrl}/docs`);
out(`  console                          ${standalone.httpUrl}/   (sign in with the login link below)`);
out(
  `  login link (once, 15 min)        ${standalone.httpUrl}/v1/login?code=${await standalone.gateway.createLoginCode(home.state.admin.id)}`,
);
out(
  `  state                            ${rel(home.paths.home)} (${home.firstRun ? 'new keys generated' : 'keys reused'}; where it runs: ${rel(join(home.paths.home, 'run.json'))})`,
);
out(
  `  admin creds                      ${rel(home.paths.adminCreds)}  (${home.state.admin.id}, org ${home.state.org.id})`,
);
if (standalone.reclaimed) out(`  note                             ${standalone.reclaimed}`);
out();
if (opts.demo === 'enterprise') {
  // A show on top of the running backbone, like the conversation: a failure leaves the backbone up.
  try {
    // Loaded only for this demo: the bridges' gRPC, Avro and CloudEvents stay out of a plain start.
    const { enterpriseSummary, runEnterpriseDemo } = await import('@parley/bridge/demo');
    // The local Salesforce, SAP and Databricks are new at each start: the last run's cursors and
    // case rooms would point at events and rooms of systems that are gone.
    const stateDir = join(home.paths.home, 'enterprise-demo');
    await rm(stateDir, { recursive: true, force: true });
    const run = await runEnterpriseDemo({
      natsUrl: standalone.natsUrl,
      adminCreds: home.paths.adminCreds,
      org: home.state.org.id,
      stateDir,
      out,
      log,
      watchers: [home.state.admin.id],
    });
    enterprise = run;
    const outcome = await Promise.race([
      run.finished,
      new Promise<undefined>((r) => setTimeout(() => r(undefined), 60_000).unref()),
    ]);
    if (outcome) {
      for (const line of await enterpriseSummary(run, outcome)) out(line);
      enterpriseTry = [
        `npx parley history ${outcome.room} --oldest --limit 20  # the case, as the local admin (a member)`,
        `npx parley audit chain ${outcome.answer}  # the credit hold: every hop back to maria`,
      ];
    } else out('enterprise  the case did not finish within 60 s (its lines follow as they come)');
  } catch (err) {
    out(
      `enterprise  did not run: ${isParleyError(err) ? `${err.code}: ${err.message}` : (err as Error).message} (Parley itself runs)`,
    );
    await enterprise?.stop();
    enterprise = undefined;
  }
  out();
} else if (opts.demo) {
  const telemetry = standalone.telemetry;
  // The demo is a show on top of a running backbone: whatever goes wrong in it, the backbone stays.
  try {
    demo = await startDemo({
      natsUrl: standalone.natsUrl,
      home,
      out,
      ...(telemetry?.mode === 'export' ? { tracer: (agent: string) => telemetry.tracer(agent) } : {}),
    });
    const done = await Promise.race([
      demo.finished.then(() => true),
      new Promise<false>((r) => setTimeout(() => r(false), 10_000).unref()),
    ]);
    if (!done) out('demo  is still running after 10 s (its lines follow as they come)');
  } catch (err) {
    out(
      `demo  did not run: ${isParleyError(err) ? `${err.code}: ${err.message}` : (err as Error).message} (Parley itself runs; --no-demo skips the demo)`,
    );
    await demo?.stop();
    demo = undefined;
  }
  out();
}
// The commands below must work as printed in another terminal: the CLI finds this backbone through
// the home's run.json, and the home through PARLEY_HOME unless it is ./.parley.
const defaultHome = join(process.cwd(), '.parley') === home.paths.home;
const tryLines = [
  `curl ${standalone.httpUrl}/healthz`,
  ...(defaultHome
    ? []
    : [`export PARLEY_HOME=${home.paths.home}   # the CLI finds this backbone through it`]),
  'npx parley whoami                       # you are the local admin',
  ...(demo
    ? [
        'npx parley tail --count 6               # the demo conversation, from your inbox',
        `npx parley contact list --as ${rel(home.paths.credsDir)}/auditor.creds  # the demo's consent step`,
        'npx parley usage --by room              # what the demo agents reported, by room',
      ]
    : []),
  ...enterpriseTry,
  'npx parley room create "my room" --json  # then: npx parley send <room> hello',
];
out('Try, in another terminal:');
for (const l of tryLines) out(`  ${l}`);
out();
out('Ctrl-C stops everything; the next start reuses the keys and data.');
