import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { credsAuthenticator, connect as natsConnect } from '@nats-io/transport-node';
import { type BackboneOptions, newId } from '@parley/contracts';
import { mintParticipantCreds, mintServiceCreds, publicKeys } from '@parley/governance';
import { ensureInboxConsumer, type Logger, silentLogger } from '@parley/kit';
import type { RoomsConfig } from '@parley/rooms';
import { type Agent, type AgentOptions, connect } from '@parley/sdk';
import {
  freePort,
  openHome,
  type Standalone,
  type StandaloneOptions,
  startStandalone,
} from '@parley/standalone';
import { startServer, type TestServer } from './index.js';

/** A whole Parley (nats-server + every service) for a test, in a temporary home. */
export interface TestParley extends Standalone {
  /**
   * A new participant with an inbox and creds, without going through the registry (the rooms
   * service only needs the inbox consumer). Tests of the registry use its API instead.
   */
  participant(kind?: 'agent' | 'user'): Promise<{ id: string; creds: string }>;
  /** Connects a participant with the SDK (closed by `destroy`). */
  connect(creds: string, options?: Omit<AgentOptions, 'creds' | 'servers'>): Promise<Agent>;
  /** Creds of a Parley service (full access), for inspecting streams in tests. */
  serviceCreds(name?: string): Promise<string>;
  /** The 3-node cluster the services run against (cluster mode only): kill -9 and restart nodes. */
  cluster?: TestServer;
  /** Stops everything and removes the home directory. */
  destroy(): Promise<void>;
}

/** Options of {@link startParley}. */
export interface StartParleyOptions {
  backbone?: BackboneOptions;
  rooms?: Partial<RoomsConfig>;
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
      cluster = await startServer({ nodes: 3, keys: (await openHome(home)).keys });
    }
    parley = await startStandalone({
      home,
      natsPort: await freePort(),
      httpPort: await freePort(),
      log: options.log ?? silentLogger(),
      ...(backbone ? { backbone } : {}),
      ...(options.rooms ? { rooms: options.rooms } : {}),
      ...(cluster ? { natsServers: cluster.urls } : {}),
      ...(options.telemetry ? { telemetry: options.telemetry } : {}),
      ...(options.telemetryBatch ? { telemetryBatch: options.telemetryBatch } : {}),
    });
    const running = parley;
    const keys = running.home.keys;
    const serviceCreds = async (name = 'test') => (await mintServiceCreds(keys, name)).creds;
    const servers = running.natsUrl.split(',');
    const admin = await natsConnect({
      servers,
      authenticator: credsAuthenticator(new TextEncoder().encode(await serviceCreds())),
      noAsyncTraces: true,
    });
    const jsm = await jetstreamManager(admin);
    const agents: Agent[] = [];
    // Delegate to the running backbone (not a copy: `nats` changes when it is restarted).
    const extra: Omit<TestParley, keyof Standalone> = {
      ...(cluster ? { cluster } : {}),
      serviceCreds,
      async participant(kind = 'agent') {
        const id = newId(kind);
        await ensureInboxConsumer(jsm, id, backbone ?? {});
        const { creds } = await mintParticipantCreds(
          keys.participantSigningSeed,
          publicKeys(keys).account,
          id,
        );
        return { id, creds };
      },
      async connect(creds, opts = {}) {
        const agent = await connect({ ...opts, servers, creds });
        agents.push(agent);
        return agent;
      },
      async destroy() {
        await Promise.allSettled(agents.map((a) => a.close()));
        await admin.close();
        await running.stop();
        await cluster?.stop();
        await rm(home, { recursive: true, force: true });
      },
    };
    // On a cluster, "NATS restarts" means every node goes down and comes back with its data.
    const restartCluster = async ({ kill = false } = {}) => {
      for (let i = 0; i < (cluster?.urls.length ?? 0); i++) {
        if (kill) await cluster?.kill9(i);
        else await cluster?.stopNode(i);
      }
      for (let i = 0; i < (cluster?.urls.length ?? 0); i++) await cluster?.restart(i);
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
