/**
 * The local backbone: a nats-server child in operator mode, the streams and buckets, every Parley
 * service in this process, and the health endpoint. `npm start` runs it through main.ts.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type JetStreamManager, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { type ConsentConfig, defaultConfig as consentDefaults, createConsentService } from '@parley/consent';
import { type BackboneOptions, serviceId } from '@parley/contracts';
import {
  createGatewayService,
  type GatewayConfig,
  type GatewayService,
  defaultConfig as gatewayDefaults,
  registerGateway,
} from '@parley/gateway';
import {
  accountSigner,
  createGovernanceService,
  mintServiceCreds,
  mintSystemCreds,
  publicKeys,
  revocationsOf,
  signServerJwts,
} from '@parley/governance';
import {
  connectNats,
  createHealthServer,
  createMetrics,
  ensureBackbone,
  ensureInboxConsumer,
  type Logger,
  type ParleyMetrics,
  type ParleyService,
  serverList,
  startTelemetry,
  type Telemetry,
  type TelemetryConfig,
} from '@parley/kit';
import { createMcpService, registerMcpHttp } from '@parley/mcp';
import { createRegistryService } from '@parley/registry';
import { createRoomsService, type RoomsConfig, defaultConfig as roomsDefaults } from '@parley/rooms';
import { type Home, openHome } from './home.js';
import { checkPortFree, findNatsServer, type NatsServerProcess, startNatsServer } from './nats-server.js';

/** A problem the person starting Parley can fix; printed without a stack trace. */
export class StartupError extends Error {
  override name = 'StartupError';
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
   * Services reconnect by themselves.
   */
  restartNats(options?: { kill?: boolean }): Promise<void>;
  /** Stops services, drains connections, stops nats-server, flushes telemetry. */
  stop(): Promise<void>;
}

/** Starts the local backbone. */
export async function startStandalone(o: StandaloneOptions): Promise<Standalone> {
  const host = o.host ?? '127.0.0.1';
  const log = o.log;
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
  const connections: NatsConnection[] = [];
  const services: ParleyService[] = [];
  let http: ReturnType<typeof createHealthServer> | undefined;
  // One registry for every service in the process: one /metrics shows them all.
  const metrics = createMetrics();
  let telemetry: Telemetry | undefined;
  let jsm: JetStreamManager | undefined;
  let gateway: GatewayService | undefined;

  const stop = async () => {
    // HTTP first: MCP sessions on it still need their connection to give back what they held.
    await http?.close();
    for (const s of [...services].reverse())
      await s.stop().catch((err) => log.warn({ err }, 'service stop failed'));
    await Promise.allSettled(connections.map((nc) => nc.drain()));
    await nats?.stop();
    await telemetry?.shutdown();
  };

  try {
    if (o.telemetry) {
      telemetry = await startTelemetry({
        config: o.telemetry,
        serviceName: 'parley-standalone',
        log,
        ...(o.telemetryBatch ? { batch: o.telemetryBatch } : {}),
      });
    }
    const observe = (name: string) => ({
      ...(telemetry ? { tracer: telemetry.tracer(name) } : {}),
      metrics,
    });
    const connectAs = async (name: string) => {
      const creds = await mintServiceCreds(keys, name);
      const nc = await connectNats({
        servers: serverList(natsUrl),
        name: `parley-${name}`,
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
    const report = await ensureBackbone(setup, o.backbone ?? {}, log);
    jsm = await jetstreamManager(setup);
    // The local admin takes part like anyone else: it needs an inbox.
    await ensureInboxConsumer(jsm, home.state.admin.id, o.backbone ?? {});
    log.debug({ report }, 'backbone ready');

    const registry = createRegistryService({
      nc: await connectAs('registry'),
      log,
      ...observe('registry'),
      ...(o.backbone ? { backbone: o.backbone } : {}),
    });
    const governance = createGovernanceService({
      nc: await connectAs('governance'),
      log,
      ...observe('governance'),
      config: {
        PARLEY_ACCOUNT_PUBLIC_KEY: pub.account,
        PARLEY_PARTICIPANT_SIGNING_SEED: keys.participantSigningSeed,
        PARLEY_DELEGATION_KEYS: JSON.stringify(home.delegationKeys),
      },
      // Revocations: governance re-signs the account JWT and pushes it as the system user.
      accountUpdates: { signer: accountSigner(keys), systemNc: await connectSystem() },
    });
    const rooms = createRoomsService({
      nc: await connectAs('rooms'),
      log,
      ...observe('rooms'),
      config: roomsDefaults({
        PARLEY_REPLICA_ID: 'standalone',
        ...(o.backbone?.partitions ? { PARLEY_PARTITIONS: o.backbone.partitions } : {}),
        ...(o.backbone?.leaseTtlMs ? { PARLEY_LEASE_TTL_MS: o.backbone.leaseTtlMs } : {}),
        ...o.rooms,
      }),
    });
    // Consent: contact requests and the check rooms asks before an invite across owners.
    const consent = createConsentService({
      nc: await connectAs('consent'),
      log,
      ...observe('consent'),
      config: consentDefaults(o.consent),
    });
    // MCP: runtime bindings and the tokens of the HTTP endpoint /mcp.
    const mcp = createMcpService({ nc: await connectAs('mcp'), log, ...observe('mcp') });
    // The gateway: /v1 on the HTTP port below, acting for each principal over its own connection.
    gateway = createGatewayService({
      nc: await connectAs('gateway'),
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
    for (const s of [registry, governance, rooms, consent, mcp, gateway]) {
      await s.start();
      services.push(s);
    }
    await registry.seed({ org: home.state.org, admin: home.state.admin });

    http = createHealthServer({
      log,
      checks: {
        nats: () => (nats === undefined || nats.pid !== undefined) && !setup.isClosed(),
        ...Object.fromEntries(services.map((s) => [s.name, () => s.ready()])),
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
  } catch (err) {
    await stop();
    throw err;
  }
  if (!jsm || !gateway) throw new Error('unreachable: backbone not set up');
  return {
    natsUrl,
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
    async restartNats({ kill = false } = {}) {
      if (!nats) throw new Error('restartNats: nats-server is not a child of this process (natsServers)');
      if (kill) await nats.kill9();
      else await nats.stop();
      nats = await startNatsServer(natsOptions);
    },
    stop,
  };
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
