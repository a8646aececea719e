/**
 * The local backbone: a nats-server child in operator mode, the streams and buckets, every Parley
 * service in this process, and the health endpoint. `npm start` runs it through main.ts.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { JetStreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { type ConsentConfig, defaultConfig as consentDefaults, createConsentService } from '@parley/consent';
import { type BackboneOptions, buckets, serviceId } from '@parley/contracts';
import {
  createGatewayService,
  type GatewayConfig,
  type GatewayService,
  defaultConfig as gatewayDefaults,
  registerGateway,
} from '@parley/gateway';
import { createGovernanceService } from '@parley/governance';
import {
  accountSigner,
  mintResponderCreds,
  mintServiceCreds,
  mintSystemCreds,
  publicKeys,
  revocationsOf,
  signServerJwts,
} from '@parley/keys';
import {
  closeHttpServer,
  connectNats,
  createHealthServer,
  createMetrics,
  createShutdown,
  ensureBackbone,
  ensureInboxConsumer,
  jetstreamManagerReady,
  type Logger,
  type ParleyMetrics,
  type ParleyService,
  retryJetStream,
  serverList,
  startTelemetry,
  type Telemetry,
  type TelemetryConfig,
} from '@parley/kit';
import { createMcpService, registerMcpHttp } from '@parley/mcp';
import { checkPortFree, findNatsServer, type NatsServerProcess, startNatsServer } from '@parley/nats-server';
import { createRegistryService } from '@parley/registry';
import { createRoomsService, type RoomsConfig, defaultConfig as roomsDefaults } from '@parley/rooms';
import { type Home, homePaths, openHome } from './home.js';
import { HomeInUseError, reclaimHome, removeRun, writeRun } from './run-file.js';

/** A problem the person starting Parley can fix; printed without a stack trace. */
export class StartupError extends Error {
  override name = 'StartupError';
}

/** {@link Standalone.stop} ran out of time: `pending` names what did not stop by the deadline. */
export class StopTimeoutError extends Error {
  override name = 'StopTimeoutError';
  constructor(
    readonly pending: string[],
    readonly deadlineMs: number,
  ) {
    super(
      `did not stop within ${(deadlineMs / 1000).toFixed(0)} s: ${pending.join(', ')} (nats-server was stopped regardless)`,
    );
  }
}

/** Options of {@link Standalone.stop}. */
export interface StopOptions {
  /** The whole stop's deadline; past it, what is left is abandoned and nats-server killed. @default 30000 */
  deadlineMs?: number;
}

/** Options of {@link startStandalone}. */
export interface StandaloneOptions {
  /** State directory. */
  home: string;
  /** NATS client port. */
  natsPort: number;
  /** Port of /healthz and /readyz. */
  httpPort: number;
  /** Port of the NATS WebSocket listener (remote SDK/MCP clients: `--server ws://…`); absent: none. */
  natsWsPort?: number;
  /** Interface everything listens on. @default 127.0.0.1 */
  host?: string;
  /** nats-server binary; found on PATH when absent. */
  natsServerBin?: string;
  log: Logger;
  /** Stream/bucket sizing. */
  backbone?: BackboneOptions;
  /**
   * The `OTEL_*` settings. Each service exports as `parley-<service>`; the process itself (the SDK
   * path, e.g. the demo) as `OTEL_SERVICE_NAME` or `parley-standalone`. Absent: no telemetry is
   * started at all (the API stays a no-op).
   */
  telemetry?: TelemetryConfig;
  /** Batch export settings (tests shorten the delay). */
  telemetryBatch?: Parameters<typeof startTelemetry>[0]['batch'];
  /** Rooms service settings (partitions and lease TTL follow `backbone` unless given). */
  rooms?: Partial<RoomsConfig>;
  /** Consent service settings (e.g. a short request TTL in tests). */
  consent?: Partial<ConsentConfig>;
  /**
   * NATS servers to use instead of starting nats-server (a test's 3-node cluster). They must run in
   * operator mode with this home's keys; `natsPort` and `natsServerBin` are then unused.
   */
  natsServers?: string[];
  /** Host names `/mcp` accepts in Host/Origin besides loopback (DNS-rebinding protection). */
  mcpAllowedHosts?: string[];
  /** Gateway settings as environment values (`PARLEY_OIDC_ISSUER`, …); see the gateway's config. */
  gateway?: Partial<Record<keyof GatewayConfig, string>>;
}

/** A running backbone. */
export interface Standalone {
  natsUrl: string;
  /** The version nats-server reported at start (for the banner and its known defects). */
  natsVersion: string;
  /** The NATS WebSocket URL, when the listener runs (`natsWsPort`). */
  natsWsUrl: string | undefined;
  httpUrl: string;
  home: Home;
  /** The nats-server child; undefined when `natsServers` named servers run by someone else. */
  nats: NatsServerProcess | undefined;
  services: ParleyService[];
  /** The HTTP/WebSocket edge on the same port as /healthz (login links for the local admin). */
  gateway: GatewayService;
  /** Every service's metrics, served together on `/metrics`. */
  metrics: ParleyMetrics;
  /** The process's telemetry, when started with `telemetry` settings. */
  telemetry: Telemetry | undefined;
  /** A JetStream manager on a service connection (setup work: inboxes, inspection). */
  jsm: JetStreamManager;
  /**
   * Restarts nats-server with the same configuration and data (`kill: true` = SIGKILL, a crash).
   * Services reconnect by themselves. `whileStopped` runs between the stop and the start (e.g. to
   * work on the store, as a node losing data would).
   */
  restartNats(options?: { kill?: boolean; whileStopped?: () => Promise<void> }): Promise<void>;
  /**
   * A sentence saying what this start cleaned up from an earlier run that crashed (a nats-server it
   * left behind), if anything.
   */
  reclaimed: string | undefined;
  /**
   * Stops services, drains connections, stops nats-server, flushes telemetry, removes run.json.
   * Bounded by `deadlineMs`: past it, rejects with {@link StopTimeoutError} naming what did not stop,
   * after killing nats-server. Calling it again returns the same stop.
   */
  stop(options?: StopOptions): Promise<void>;
}

/** Starts the local backbone. */
export async function startStandalone(o: StandaloneOptions): Promise<Standalone> {
  const host = o.host ?? '127.0.0.1';
  const log = o.log;
  // Before the ports are checked: a nats-server a crashed run left behind holds one of them.
  let reclaimed: string | undefined;
  try {
    reclaimed = o.natsServers ? undefined : await reclaimHome(homePaths(o.home), log);
  } catch (err) {
    if (err instanceof HomeInUseError) throw new StartupError(err.message);
    throw err;
  }
  for (const [port, flag] of [
    [o.natsPort, '--nats-port'],
    [o.httpPort, '--http-port'],
    ...(o.natsWsPort ? ([[o.natsWsPort, '--nats-ws-port']] as const) : []),
  ] as const) {
    if (o.natsServers && flag !== '--http-port') continue;
    try {
      await checkPortFree(port, host);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      throw new StartupError(
        code === 'EADDRINUSE'
          ? `port ${port} on ${host} is already in use: stop what uses it, or choose another port with ${flag} <port>`
          : `cannot listen on ${host}:${port} (${code ?? (err as Error).message}); choose another port with ${flag} <port>`,
      );
    }
  }
  const bin = o.natsServers ? undefined : (o.natsServerBin ?? (await findNatsServer()));
  if (!bin && !o.natsServers) {
    throw new StartupError(
      'nats-server was not found on PATH (or NATS_SERVER_BIN). On Debian/Ubuntu: sudo apt-get install -y nats-server; elsewhere: https://docs.nats.io/running-a-nats-service/introduction/installation',
    );
  }
  const home = await openHome(o.home);
  const { paths, keys } = home;
  const pub = publicKeys(keys);
  const jwts = await signServerJwts({
    ...keys,
    revocations: { ...keys.revocations, ...(await pushedRevocations(paths.resolver, pub.account)) },
  });
  await writeFile(paths.operatorJwt, jwts.operator);
  const natsOptions = {
    bin: bin ?? '',
    configPath: paths.natsConfig,
    logPath: paths.natsLog,
    config: {
      serverName: 'parley-local',
      host,
      port: o.natsPort,
      storeDir: paths.jetstream,
      pidFile: paths.natsPid,
      ...(o.natsWsPort ? { websocket: { host, port: o.natsWsPort } } : {}),
      operator: {
        operatorJwtPath: paths.operatorJwt,
        systemAccount: pub.systemAccount,
        resolverDir: paths.resolver,
        preload: { [pub.systemAccount]: jwts.systemAccount, [pub.account]: jwts.account },
      },
    },
  };
  let nats = o.natsServers ? undefined : await startNatsServer(natsOptions);
  const natsUrl = nats?.url ?? (o.natsServers ?? []).join(',');
  // Exits the standalone asked for (stop, restartNats): every other exit of its nats-server is a
  // crash, and the backbone restarts it on the same store (what a supervisor or a Kubernetes
  // restart policy does) instead of running on with no server under the services.
  const expectedExits = new WeakSet<NatsServerProcess>();
  let supervisorStopped = false;
  let restarting: Promise<void> | undefined;
  const crashes: number[] = [];
  const supervise = (proc: NatsServerProcess) => {
    void proc.exited.then((code) => {
      if (supervisorStopped || expectedExits.has(proc) || proc !== nats) return;
      restarting = (async () => {
        const now = Date.now();
        crashes.push(now);
        while (crashes.length > 0 && (crashes[0] as number) < now - 60_000) crashes.shift();
        if (crashes.length > 5) {
          log.error(
            { exit: code ?? 'killed by a signal', log: paths.natsLog },
            'nats-server exited unexpectedly for the 6th time in a minute: not restarting it (its log says why)',
          );
          return;
        }
        log.error(
          { exit: code ?? 'killed by a signal', log: paths.natsLog },
          'nats-server exited unexpectedly: restarting it (its log says why)',
        );
        for (let attempt = 1; !supervisorStopped; attempt++) {
          await new Promise((r) => setTimeout(r, Math.min(250 * 2 ** attempt, 5_000)));
          if (supervisorStopped) return;
          try {
            const next = await startNatsServer(natsOptions);
            if (supervisorStopped) {
              expectedExits.add(next);
              await next.stop();
              return;
            }
            nats = next;
            supervise(next);
            await writeRun(paths, runInfo());
            log.warn({ pid: next.pid, attempt }, 'nats-server restarted');
            return;
          } catch (err) {
            log.error({ err, attempt }, 'nats-server did not start again: retrying');
          }
        }
      })().finally(() => {
        restarting = undefined;
      });
    });
  };
  if (nats) supervise(nats);
  const connections: NatsConnection[] = [];
  const services: ParleyService[] = [];
  let http: ReturnType<typeof createHealthServer> | undefined;
  // One registry for every service in the process: one /metrics shows them all.
  const metrics = createMetrics();
  let telemetry: Telemetry | undefined;
  let jsm: JetStreamManager | undefined;
  let natsVersion = 'unknown';

  const startedAt = new Date().toISOString();
  const runInfo = () => ({
    pid: process.pid,
    ...(nats?.pid ? { natsPid: nats.pid } : {}),
    natsUrl,
    httpUrl: `http://${host}:${o.httpPort}`,
    home: paths.home,
    startedAt,
  });
  // A Node process that dies (an uncaught error) takes its nats-server child with it.
  const onExit = () => {
    if (nats?.running && nats.pid) {
      try {
        process.kill(nats.pid, 'SIGTERM');
      } catch {}
    }
  };
  process.on('exit', onExit);
  let gateway: GatewayService | undefined;

  let stopping: Promise<void> | undefined;
  const stop = (options: StopOptions = {}): Promise<void> => {
    stopping ??= stopAll(options.deadlineMs ?? 30_000);
    return stopping;
  };
  const stopAll = async (deadlineMs: number) => {
    const deadline = Date.now() + deadlineMs;
    const shutdown = createShutdown(deadlineMs, log);
    const { step } = shutdown;
    // With nats-server gone (it crashed, or was killed) every drain and flush would wait for a
    // reconnect that never comes: the connections are closed first, so the services' own
    // unsubscribes fail at once instead of hanging.
    supervisorStopped = true;
    await restarting;
    if (nats) expectedExits.add(nats);
    const natsGone = nats !== undefined && !nats.running;
    if (natsGone) await Promise.allSettled(connections.map((nc) => nc.close()));
    // HTTP first: MCP sessions on it still need their connection to give back what they held. A
    // client that does not read its response (or holds a stream open) gets 2 s, then is cut off.
    if (http) {
      const server = http;
      await step('the HTTP server', () => closeHttpServer(server));
    }
    // A service may take what is left of the deadline (a slow stop under load is not a stuck one);
    // what it leaves undone is named, and nats-server is stopped regardless.
    for (const s of [...services].reverse())
      await step(`the ${s.name} service`, () => s.stop(), Number.POSITIVE_INFINITY);
    await shutdown.connections(connections);
    // nats-server is never left behind: past the deadline it gets a short grace, then SIGKILL.
    await nats?.stop(Math.max(1000, Math.min(10_000, deadline - Date.now())));
    if (telemetry) await step('telemetry', () => (telemetry as Telemetry).shutdown(), 3000);
    process.off('exit', onExit);
    await removeRun(paths).catch(() => undefined);
    if (shutdown.incomplete())
      throw new StopTimeoutError([...shutdown.abandoned, ...shutdown.notRun], deadlineMs);
  };

  try {
    if (o.telemetry) {
      telemetry = await startTelemetry({
        config: o.telemetry,
        serviceName: 'parley-standalone',
        log,
        // Without a collector, messages still get trace ids: `parley trace` works on a default start.
        traceIdsWithoutExport: true,
        ...(o.telemetryBatch ? { batch: o.telemetryBatch } : {}),
      });
    }
    const observe = (name: string) => ({
      ...(telemetry ? { tracer: telemetry.tracer(name) } : {}),
      metrics,
    });
    const connectAs = async (name: string, purpose?: string) => {
      const creds = await mintServiceCreds(keys, name);
      const nc = await connectNats({
        servers: serverList(natsUrl),
        name: purpose ? `parley-${name}-${purpose}` : `parley-${name}`,
        principal: serviceId(name),
        creds: new TextEncoder().encode(creds.creds),
        log,
      });
      connections.push(nc);
      return nc;
    };
    // The least-privilege connection each service answers requests on (publish `_INBOX.>` only).
    const responderOf = async (name: string) => {
      const creds = await mintResponderCreds(keys, name);
      const nc = await connectNats({
        servers: serverList(natsUrl),
        name: `parley-${name}-responder`,
        principal: serviceId(name),
        creds: new TextEncoder().encode(creds.creds),
        log,
      });
      connections.push(nc);
      return nc;
    };
    const connectSystem = async () => {
      const nc = await connectNats({
        servers: serverList(natsUrl),
        name: 'parley-system',
        creds: new TextEncoder().encode((await mintSystemCreds(keys)).creds),
      });
      connections.push(nc);
      return nc;
    };
    const setup = await connectAs('standalone');
    natsVersion = setup.info?.version ?? 'unknown';
    const report = await ensureBackbone(setup, o.backbone ?? {}, log);
    jsm = await jetstreamManagerReady(setup, { log });
    const ready = jsm;
    await retryJetStream('releasing stale leases', () => releaseStaleLeases(setup, log), { log });
    // The local admin takes part like anyone else: it needs an inbox.
    await retryJetStream(
      'the admin inbox consumer',
      () => ensureInboxConsumer(ready, home.state.admin.id, o.backbone ?? {}),
      { log },
    );
    log.debug({ report }, 'backbone ready');

    // Every service's two connections (and the system user's) at once: one after the other, the 13
    // connects took 0.3–0.45 s of a start.
    const connectService = async (name: string) => {
      const [nc, responder] = await Promise.all([connectAs(name), responderOf(name)]);
      return { nc, responder };
    };
    const [systemNc, registryConns, governanceConns, roomsConns, consentConns, mcpConns, gatewayConns] =
      await Promise.all([
        connectSystem(),
        connectService('registry'),
        connectService('governance'),
        connectService('rooms'),
        connectService('consent'),
        connectService('mcp'),
        connectService('gateway'),
      ]);

    const registry = createRegistryService({
      ...registryConns,
      log,
      ...observe('registry'),
      ...(o.backbone ? { backbone: o.backbone } : {}),
    });
    const governance = createGovernanceService({
      ...governanceConns,
      log,
      ...observe('governance'),
      config: {
        PARLEY_ACCOUNT_PUBLIC_KEY: pub.account,
        PARLEY_PARTICIPANT_SIGNING_SEED: keys.participantSigningSeed,
        PARLEY_DELEGATION_KEYS: JSON.stringify(home.delegationKeys),
      },
      // Revocations: governance re-signs the account JWT and pushes it as the system user.
      accountUpdates: { signer: accountSigner(keys), systemNc },
    });
    const rooms = createRoomsService({
      ...roomsConns,
      connect: (purpose) => connectAs('rooms', purpose),
      log,
      ...observe('rooms'),
      config: roomsDefaults({
        PARLEY_REPLICA_ID: REPLICA_ID,
        ...(o.backbone?.partitions ? { PARLEY_PARTITIONS: o.backbone.partitions } : {}),
        ...(o.backbone?.leaseTtlMs ? { PARLEY_LEASE_TTL_MS: o.backbone.leaseTtlMs } : {}),
        ...o.rooms,
      }),
    });
    // Consent: contact requests and the check rooms asks before an invite across owners.
    const consent = createConsentService({
      ...consentConns,
      log,
      ...observe('consent'),
      config: consentDefaults(o.consent),
    });
    // MCP: runtime bindings and the tokens of the HTTP endpoint /mcp.
    const mcp = createMcpService({
      ...mcpConns,
      // /mcp sessions act as their agent over a connection with the agent's reply prefix.
      connectAs: async (principal) =>
        connectNats({
          servers: serverList(natsUrl),
          name: `parley-mcp-as-${principal}`,
          principal,
          creds: new TextEncoder().encode((await mintServiceCreds(keys, 'mcp')).creds),
          log,
        }),
      log,
      ...observe('mcp'),
    });
    // The gateway: /v1 on the HTTP port below, acting for each principal over its own connection.
    gateway = createGatewayService({
      ...gatewayConns,
      servers: serverList(natsUrl),
      log,
      ...observe('gateway'),
      config: gatewayDefaults({
        PARLEY_GATEWAY_PUBLIC_URL: `http://${host}:${o.httpPort}`,
        // Just-in-time sign-ups (for the domains PARLEY_OIDC_JIT_DOMAINS opens) land in the local org.
        PARLEY_OIDC_JIT_ORG: home.state.org.id,
        ...o.gateway,
      }),
    });
    // Governance first: its start pushes the account JWT when the server lacks its claims (revoked
    // keys, an upgrade's permission template), and nats-server 2.9.10 answers the account's
    // JetStream requests "no responders" for a moment while it applies a push (24 of 5,913 requests
    // failed over 100 pushes, one node; a registry start failed so once). Then the rest at once, as
    // their own containers start in a deployment: one after the other they took 1.35 s of a 3-node
    // start, 0.85 s of it the rooms service's consumers electing their leaders. A service that did
    // start is stopped with the rest when another fails.
    const all = [registry, governance, rooms, consent, mcp, gateway];
    await governance.start();
    const rest = all.filter((s) => s !== governance);
    const started = await Promise.allSettled(rest.map((s) => s.start()));
    const running = new Set([governance, ...rest.filter((_, i) => started[i]?.status === 'fulfilled')]);
    services.push(...all.filter((s) => running.has(s)));
    const failed = started.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
    await registry.seed({ org: home.state.org, admin: home.state.admin });

    http = createHealthServer({
      log,
      checks: {
        nats: () => (nats === undefined || nats.pid !== undefined) && !setup.isClosed(),
        ...Object.fromEntries(services.map((s) => [s.name, () => s.ready()])),
        ...Object.assign({}, ...services.map((s) => s.checks ?? {})),
      },
      metrics,
    });
    // The MCP bridge over Streamable HTTP, for clients that cannot spawn `parley mcp`.
    await registerMcpHttp(http, {
      service: mcp,
      log,
      ...(o.mcpAllowedHosts ? { allowedHosts: o.mcpAllowedHosts } : {}),
    });
    await registerGateway(http, { service: gateway });
    await http.listen({ host, port: o.httpPort });
    await writeRun(paths, runInfo());
  } catch (err) {
    await stop().catch((e: unknown) => log.warn({ err: e }, 'stop after a failed start'));
    throw err;
  }
  if (!jsm || !gateway) throw new Error('unreachable: backbone not set up');
  return {
    natsUrl,
    natsVersion,
    natsWsUrl: o.natsWsPort && !o.natsServers ? `ws://${host}:${o.natsWsPort}` : undefined,
    httpUrl: `http://${host}:${o.httpPort}`,
    home,
    get nats() {
      return nats;
    },
    services,
    gateway,
    metrics,
    telemetry,
    jsm,
    reclaimed,
    async restartNats({
      kill = false,
      whileStopped,
    }: {
      kill?: boolean;
      whileStopped?: () => Promise<void>;
    } = {}) {
      if (!nats) throw new Error('restartNats: nats-server is not a child of this process (natsServers)');
      await restarting;
      expectedExits.add(nats);
      if (kill) await nats.kill9();
      else await nats.stop();
      try {
        await whileStopped?.();
      } finally {
        nats = await startNatsServer(natsOptions);
        supervise(nats);
        await writeRun(paths, runInfo());
      }
    },
    stop,
  };
}

/** The rooms replica id of the standalone process. */
const REPLICA_ID = 'standalone';

/**
 * Hands back the fan-out leases a crashed run of this backbone never gave back. Only one backbone
 * runs per home (run.json sees to it), so a lease held under its replica id at start is stale; left
 * alone, it would hold delivery back until it expires and the next balancing round (up to two lease
 * TTLs: ~12 s by default) — a restart after a crash would look like messages going nowhere.
 */
async function releaseStaleLeases(nc: NatsConnection, log: Logger): Promise<void> {
  const kv = await new Kvm(nc).open(buckets.leases);
  let released = 0;
  for await (const key of await kv.keys()) {
    if (!key.startsWith('fanout.') && key !== `replica.${REPLICA_ID}`) continue;
    const e = await kv.get(key);
    if (e?.operation !== 'PUT') continue;
    const holder = (e.json() as { replica?: unknown }).replica;
    if (holder !== REPLICA_ID) continue;
    await kv.delete(key, { previousSeq: e.revision }).catch(() => undefined);
    released++;
  }
  if (released) log.info({ released }, 'released the fan-out leases a crashed run left');
}

/**
 * The revocations in the account JWT the full resolver kept from the last run. The preload is signed
 * anew at every start, so it is newer than what was pushed at runtime and would replace it: without
 * carrying these over, a restart would let revoked creds connect again until governance re-pushes.
 */
async function pushedRevocations(resolverDir: string, account: string): Promise<Record<string, number>> {
  const jwt = await readFile(join(resolverDir, `${account}.jwt`), 'utf8').catch(() => undefined);
  return jwt ? revocationsOf(jwt) : {};
}
