import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { credsAuthenticator, connect as natsConnect } from '@nats-io/transport-node';
import type { ConsentConfig } from '@parley/consent';
import { type BackboneOptions, registryApi, request, subjects } from '@parley/contracts';
import { mintServiceCreds } from '@parley/keys';
import { createLogger, type Logger, silentLogger } from '@parley/kit';
import type { RoomsConfig } from '@parley/rooms';
import { type Agent, type AgentOptions, connect } from '@parley/sdk';
import {
  freePort,
  openHome,
  type Standalone,
  type StandaloneOptions,
  startStandalone,
} from '@parley/standalone';
import { type StartServerOptions, startServer, type TestServer } from './index.js';
import { type ServiceProcess, startServiceProcess } from './processes.js';

/** Environment of a rooms process with the traffic guards off, as {@link startParley} has them. */
export const GUARDS_OFF = {
  PARLEY_RATE_AGENT_PER_SEC: '0',
  PARLEY_RATE_ROOM_PER_SEC: '0',
  PARLEY_RUNAWAY_MESSAGES: '0',
} as const;

/**
 * A rooms service process against `parley` (e.g. a fan-out of its own, or a replica to kill -9):
 * service creds written to its home as `<id>.creds`, replica `id`, the traffic guards off as
 * {@link startParley} has them, connected to `parley`'s nats-server unless `env` says otherwise.
 */
export async function startRoomsProcess(
  parley: TestParley,
  id: string,
  env: Record<string, string> = {},
): Promise<ServiceProcess> {
  const creds = join(parley.home.paths.credsDir, `${id}.creds`);
  await writeFile(creds, await parley.serviceCreds('rooms'), { mode: 0o600 });
  return startServiceProcess('rooms', {
    ...GUARDS_OFF,
    NATS_URL: parley.natsUrl,
    NATS_CREDS: creds,
    PARLEY_REPLICA_ID: id,
    ...env,
  });
}

/** A whole Parley (nats-server + every service) for a test, in a temporary home. */
export interface TestParley extends Standalone {
  /**
   * A new participant registered through the registry by the local admin: an agent owned by the
   * admin (so any two of them share an owner and need no contact request), or a human in the local
   * org. Tests of the registry and of consent create their own orgs, people and agents.
   */
  participant(kind?: 'agent' | 'user'): Promise<{ id: string; creds: string }>;
  /** Connects a participant with the SDK (closed by `destroy`). */
  connect(creds: string, options?: Omit<AgentOptions, 'creds' | 'servers'>): Promise<Agent>;
  /** Creds of a Parley service (full access, less the subjects `deny.pub` names). */
  serviceCreds(name?: string, deny?: { pub?: string[] }): Promise<string>;
  /** The 3-node cluster the services run against (cluster mode only): kill -9 and restart nodes. */
  cluster?: TestServer;
  /**
   * Aborted when `destroy` begins: work a test started in the background and did not wait for (a
   * {@link whenStreamsAnswer} of an earlier restart) ends with it instead of reconnecting to a
   * stopped backbone's port, which another test file's server may have taken by then.
   */
  readonly signal: AbortSignal;
  /** Stops everything and removes the home directory. */
  destroy(): Promise<void>;
}

/** Options of {@link startParley}. */
export interface StartParleyOptions {
  backbone?: BackboneOptions;
  /**
   * Rooms service settings. Unlike a deployment, the send guards that watch traffic volume (rate
   * limits, the runaway detector) are off unless a test turns them on here: most tests send fast
   * between agents on purpose. {@link GUARDS_OFF} is the same for rooms replicas run as processes.
   */
  rooms?: Partial<RoomsConfig>;
  consent?: Partial<ConsentConfig>;
  /** Gateway settings as environment values (OIDC issuer, webhook allow list, …). */
  gateway?: StandaloneOptions['gateway'];
  log?: Logger;
  /** `OTEL_*` settings, e.g. `loadTelemetryConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url })`. */
  telemetry?: StandaloneOptions['telemetry'];
  /** Batch export settings (tests shorten the delay). */
  telemetryBatch?: StandaloneOptions['telemetryBatch'];
  /**
   * 3: run the services against a 3-node JetStream cluster in operator mode, with R3 streams and
   * buckets and R1 inbox consumers (unless `backbone` says otherwise). @default PARLEY_TEST_NODES, else 1
   */
  nodes?: 1 | 3;
  /** Cluster only: how the nodes' routes are made (see {@link StartServerOptions.routes}). */
  routes?: StartServerOptions['routes'];
}

/** The cluster size `pnpm test:cluster` asks for (PARLEY_TEST_NODES=3). */
export function testNodes(): 1 | 3 {
  return process.env.PARLEY_TEST_NODES === '3' ? 3 : 1;
}

/** Starts the standalone backbone on free ports in a temporary home. */
export async function startParley(options: StartParleyOptions = {}): Promise<TestParley> {
  const home = await mkdtemp(join(tmpdir(), 'parley-home-'));
  let parley: Standalone | undefined;
  let cluster: TestServer | undefined;
  const nodes = options.nodes ?? testNodes();
  const backbone: BackboneOptions | undefined =
    nodes === 3 ? { replicas: 3, inboxConsumerReplicas: 1, ...options.backbone } : options.backbone;
  try {
    if (nodes === 3) {
      // The cluster runs with the home's keys, so the services' and participants' creds are valid there.
      cluster = await startServer({
        nodes: 3,
        keys: (await openHome(home)).keys,
        ...(options.routes ? { routes: options.routes } : {}),
      });
    }
    parley = await startStandalone({
      home,
      natsPort: await freePort(),
      httpPort: await freePort(),
      natsWsPort: await freePort(),
      log:
        options.log ??
        (process.env.PARLEY_TEST_LOG
          ? createLogger({ name: 'test', level: process.env.PARLEY_TEST_LOG })
          : silentLogger()),
      ...(backbone ? { backbone } : {}),
      rooms: {
        PARLEY_RATE_AGENT_PER_SEC: 0,
        PARLEY_RATE_ROOM_PER_SEC: 0,
        PARLEY_RUNAWAY_MESSAGES: 0,
        ...options.rooms,
      },
      ...(cluster ? { natsServers: cluster.urls } : {}),
      ...(options.consent ? { consent: options.consent } : {}),
      ...(options.gateway ? { gateway: options.gateway } : {}),
      ...(options.telemetry ? { telemetry: options.telemetry } : {}),
      ...(options.telemetryBatch ? { telemetryBatch: options.telemetryBatch } : {}),
    });
    const running = parley;
    const keys = running.home.keys;
    const serviceCreds = async (name = 'test', deny: { pub?: string[] } = {}) =>
      (await mintServiceCreds(keys, name, deny)).creds;
    const servers = running.natsUrl.split(',');
    const adminId = running.home.state.admin.id;
    const admin = await natsConnect({
      servers,
      authenticator: credsAuthenticator(await readFile(running.home.paths.adminCreds)),
      inboxPrefix: subjects.replyPrefix(adminId),
      noAsyncTraces: true,
    });
    let made = 0;
    const agents: Agent[] = [];
    const destroying = new AbortController();
    // Delegate to the running backbone (not a copy: `nats` changes when it is restarted).
    const extra: Omit<TestParley, keyof Standalone> = {
      ...(cluster ? { cluster } : {}),
      serviceCreds,
      signal: destroying.signal,
      async participant(kind = 'agent') {
        const name = `participant-${++made}-${Date.now().toString(36)}`;
        if (kind === 'user') {
          const r = await request(admin, adminId, registryApi.createUser, {
            name,
            org: running.home.state.org.id,
          });
          return { id: r.user.id, creds: r.credentials.creds };
        }
        const r = await request(admin, adminId, registryApi.createAgent, { card: { name } });
        return { id: r.agent.id, creds: r.credentials.creds };
      },
      async connect(creds, opts = {}) {
        const agent = await connect({ ...opts, servers, creds });
        agents.push(agent);
        return agent;
      },
      async destroy() {
        destroying.abort();
        await Promise.allSettled(agents.map((a) => a.close()));
        await admin.close();
        await running.stop();
        await cluster?.stop();
        await rm(home, { recursive: true, force: true });
      },
    };
    // On a cluster, "NATS restarts" means every node goes down and comes back with its data. They
    // come back together, as a cluster does after a power cut: one at a time, a node waits alone
    // for peers that are not started yet.
    const restartCluster: Standalone['restartNats'] = async ({ kill = false, whileStopped } = {}) => {
      const nodes = Array.from({ length: cluster?.urls.length ?? 0 }, (_, i) => i);
      for (const i of nodes) {
        if (kill) await cluster?.kill9(i);
        else await cluster?.stopNode(i);
      }
      await whileStopped?.();
      await Promise.all(nodes.map((i) => cluster?.restart(i)));
    };
    return Object.assign(
      Object.create(running) as Standalone,
      extra,
      cluster ? { restartNats: restartCluster } : {},
    );
  } catch (err) {
    await parley?.stop();
    await cluster?.stop();
    await rm(home, { recursive: true, force: true });
    throw err;
  }
}
