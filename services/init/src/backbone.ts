import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { BackboneOptions } from '@parley/contracts';
import {
  type BackboneReport,
  connectNats,
  ensureBackbone,
  openRegistryBucket,
  seedRegistry,
} from '@parley/kit';
import type { Logger } from 'pino';
import type { DeploymentState } from './layout.js';

/** Options of {@link setUpBackbone}. */
export interface SetUpBackboneOptions {
  servers: string[];
  /** Service creds (path or contents); none for a server without auth. */
  creds?: string;
  backbone: BackboneOptions;
  /** The first org and admin to seed into the registry; nothing is seeded without it. */
  state?: DeploymentState;
  /** How long to wait for NATS and then for JetStream (a cluster needs a meta leader). */
  waitMs: number;
  log: Logger;
}

/** What {@link setUpBackbone} did. */
export interface SetUpBackboneResult {
  report: BackboneReport;
  seeded: boolean;
  /** Milliseconds spent waiting for NATS and JetStream. */
  waitedMs: number;
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function connectWhenUp(o: SetUpBackboneOptions, deadline: number): Promise<NatsConnection> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await connectNats({
        servers: o.servers,
        name: 'parley-init',
        principal: 'svc_init',
        ...(o.creds ? { creds: o.creds } : {}),
      });
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`NATS at ${o.servers.join(',')} is not reachable: ${err}`);
      if (attempt === 1 || attempt % 10 === 0)
        o.log.info({ err: (err as Error).message, attempt }, 'waiting for NATS');
      await pause(1000);
    }
  }
}

async function waitForJetStream(nc: NatsConnection, o: SetUpBackboneOptions, deadline: number) {
  const jsm = await jetstreamManager(nc, { checkAPI: false, timeout: 5000 });
  for (let attempt = 1; ; attempt++) {
    try {
      await jsm.getAccountInfo();
      return;
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`JetStream is not available: ${err}`);
      if (attempt === 1 || attempt % 10 === 0)
        o.log.info({ err: (err as Error).message, attempt }, 'waiting for JetStream');
      await pause(500);
    }
  }
}

/**
 * Waits for NATS and JetStream, creates or updates every stream and bucket (idempotent, safe from
 * several pods at once), and seeds the first org and its admin into the registry.
 */
export async function setUpBackbone(o: SetUpBackboneOptions): Promise<SetUpBackboneResult> {
  const started = Date.now();
  const deadline = started + o.waitMs;
  const nc = await connectWhenUp(o, deadline);
  try {
    await waitForJetStream(nc, o, deadline);
    const waitedMs = Date.now() - started;
    const report = await ensureBackbone(nc, o.backbone, o.log);
    let seeded = false;
    if (o.state) {
      // The records a seed writes are kit's registry-store layout, the registry's own: no registry
      // service has to run for it (init runs before any service does).
      await seedRegistry({
        kv: await openRegistryBucket(nc),
        jsm: await jetstreamManager(nc),
        org: o.state.org,
        admin: o.state.admin,
      });
      seeded = true;
    }
    return { report, seeded, waitedMs };
  } finally {
    await nc.drain().catch(() => undefined);
  }
}
