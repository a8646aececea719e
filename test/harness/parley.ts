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
import { freePort, type Standalone, startStandalone } from '@parley/standalone';

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
  rooms?: Partial<RoomsConfig>;
  log?: Logger;
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
      ...(options.rooms ? { rooms: options.rooms } : {}),
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
    return {
      ...running,
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
  } catch (err) {
    await parley?.stop();
    await rm(home, { recursive: true, force: true });
    throw err;
  }
}
