import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { credsAuthenticator, connect as natsConnect } from '@nats-io/transport-node';
import type { ConsentConfig } from '@parley/consent';
import { type BackboneOptions, registryApi, request, subjects } from '@parley/contracts';
import { mintServiceCreds } from '@parley/governance';
import { type Logger, silentLogger } from '@parley/kit';
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
   * A new participant registered through the registry by the local admin: an agent owned by the
   * admin (so any two of them share an owner and need no contact request), or a human in the local
   * org. Tests of the registry and of consent create their own orgs, people and agents.
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
  consent?: Partial<ConsentConfig>;
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
      ...(options.consent ? { consent: options.consent } : {}),
      ...(options.telemetry ? { telemetry: options.telemetry } : {}),
      ...(options.telemetryBatch ? { telemetryBatch: options.telemetryBatch } : {}),
    });
    const running = parley;
    const keys = running.home.keys;
    const serviceCreds = async (name = 'test') => (await mintServiceCreds(keys, name)).creds;
    const adminId = running.home.state.admin.id;
    const admin = await natsConnect({
      servers: running.natsUrl,
      authenticator: credsAuthenticator(await readFile(running.home.paths.adminCreds)),
      inboxPrefix: subjects.replyPrefix(adminId),
      noAsyncTraces: true,
    });
    let made = 0;
    const agents: Agent[] = [];
    // Delegate to the running backbone (not a copy: `nats` changes when it is restarted).
    const extra: Omit<TestParley, keyof Standalone> = {
      serviceCreds,
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
