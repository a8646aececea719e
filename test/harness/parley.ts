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
import { freePort, type Standalone, type StandaloneOptions, startStandalone } from '@parley/standalone';

/** Environment of a rooms process with the traffic guards off, as {@link startParley} has them. */
export const GUARDS_OFF = {
  PARLEY_RATE_AGENT_PER_SEC: '0',
  PARLEY_RATE_ROOM_PER_SEC: '0',
  PARLEY_RUNAWAY_MESSAGES: '0',
} as const;

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
  log?: Logger;
  /** `OTEL_*` settings, e.g. `loadTelemetryConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url })`. */
  telemetry?: StandaloneOptions['telemetry'];
  /** Batch export settings (tests shorten the delay). */
  telemetryBatch?: StandaloneOptions['telemetryBatch'];
}

/** Starts the standalone backbone on free ports in a temporary home. */
export async function startParley(options: StartParleyOptions = {}): Promise<TestParley> {
  const home = await mkdtemp(join(tmpdir(), 'parley-home-'));
  let parley: Standalone | undefined;
  try {
    parley = await startStandalone({
      home,
      natsPort: await freePort(),
      httpPort: await freePort(),
      log: options.log ?? silentLogger(),
      ...(options.backbone ? { backbone: options.backbone } : {}),
      rooms: {
        PARLEY_RATE_AGENT_PER_SEC: 0,
        PARLEY_RATE_ROOM_PER_SEC: 0,
        PARLEY_RUNAWAY_MESSAGES: 0,
        ...options.rooms,
      },
      ...(options.telemetry ? { telemetry: options.telemetry } : {}),
      ...(options.telemetryBatch ? { telemetryBatch: options.telemetryBatch } : {}),
    });
    const running = parley;
    const keys = running.home.keys;
    const serviceCreds = async (name = 'test') => (await mintServiceCreds(keys, name)).creds;
    const admin = await natsConnect({
      servers: running.natsUrl,
      authenticator: credsAuthenticator(new TextEncoder().encode(await serviceCreds())),
      noAsyncTraces: true,
    });
    const jsm = await jetstreamManager(admin);
    const agents: Agent[] = [];
    // Delegate to the running backbone (not a copy: `nats` changes when it is restarted).
    const extra: Omit<TestParley, keyof Standalone> = {
      serviceCreds,
      async participant(kind = 'agent') {
        const id = newId(kind);
        await ensureInboxConsumer(jsm, id, options.backbone ?? {});
        const { creds } = await mintParticipantCreds(
          keys.participantSigningSeed,
          publicKeys(keys).account,
          id,
        );
        return { id, creds };
      },
      async connect(creds, opts = {}) {
        const agent = await connect({ ...opts, servers: running.natsUrl, creds });
        agents.push(agent);
        return agent;
      },
      async destroy() {
        await Promise.allSettled(agents.map((a) => a.close()));
        await admin.close();
        await running.stop();
        await rm(home, { recursive: true, force: true });
      },
    };
    return Object.assign(Object.create(running) as Standalone, extra);
  } catch (err) {
    await parley?.stop();
    await rm(home, { recursive: true, force: true });
    throw err;
  }
}
