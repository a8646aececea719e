/** A small org for bridge tests: an admin, people with grants, bridge agents with scopes. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { consentApi, governanceApi, type HistoryEntry } from '@parley/contracts';
import { silentLogger } from '@parley/kit';
import { type Agent, connect } from '@parley/sdk';
import { connectAdmin, createAgent, createHuman, createOrg, type TestParley } from '@parley/test/harness';
import { Bridge } from '../src/bridge.js';
import { type BridgeMapping, loadMapping } from '../src/mapping.js';
import { createBridgeMetrics } from '../src/metrics.js';
import { type RunningBridge, startBridge } from '../src/runtime.js';
import { BridgeState } from '../src/state.js';

let orgs = 0;

/** A person or agent of the test org, connected. */
export interface Member {
  id: string;
  creds: string;
  agent: Agent;
}

/** An org with everyone pre-approved as contacts. */
export async function createWorld(parley: TestParley) {
  const admin = await connectAdmin(parley);
  const org = await createOrg(admin, `bridge-org-${++orgs}-${Date.now()}`);
  await admin.call(consentApi.setPolicy, { org: org.id, preApproveWithinOrg: true });
  const agents: Agent[] = [admin];
  const dirs: string[] = [];
  const join_ = async (id: string, creds: string) => {
    const agent = await connect({ servers: parley.natsUrl, creds, presence: false });
    agents.push(agent);
    return { id, creds, agent };
  };
  return {
    admin,
    org,
    /** A person of the org holding `scopes`. */
    async person(name: string, scopes: string[] = []): Promise<Member> {
      const h = await createHuman(admin, { org: org.id, name, role: 'member' });
      if (scopes.length) await admin.call(governanceApi.setGrants, { participant: h.user.id, scopes });
      return join_(h.user.id, h.creds);
    },
    /** A bridge agent (runtime `bridge`) owned by `owner`, its card listing `scopes`; not connected. */
    async bridgeAgent(owner: Member, name: string, scopes: string[]): Promise<{ id: string; creds: string }> {
      const { agent, creds } = await createAgent(owner.agent, {
        name,
        scopes,
        runtime: 'bridge',
        visibility: 'org',
      });
      return { id: agent.id, creds };
    },
    /** A temporary state directory (removed by close). */
    async stateDir(): Promise<string> {
      const d = await mkdtemp(join(tmpdir(), 'parley-bridge-'));
      dirs.push(d);
      return d;
    },
    /** A Bridge over an already connected agent. */
    async bridge(
      agent: Agent,
      mapping: string | BridgeMapping,
      stateDir?: string,
      env?: Record<string, string>,
    ) {
      const state = await BridgeState.open(stateDir ?? (await this.stateDir()));
      const m = typeof mapping === 'string' ? loadMapping(mapping) : mapping;
      return new Bridge({
        agent,
        mapping: m,
        state,
        log: silentLogger(),
        metrics: createBridgeMetrics(m.bridge, { processMetrics: false }),
        ...(env ? { env } : {}),
      });
    },
    async connect(creds: string): Promise<Agent> {
      const a = await connect({ servers: parley.natsUrl, creds, presence: false });
      agents.push(a);
      return a;
    },
    async close() {
      await Promise.allSettled(agents.map((a) => a.close()));
      await Promise.allSettled(dirs.map((d) => rm(d, { recursive: true, force: true })));
    },
  };
}

/** Every entry of a room, oldest first. */
export async function historyOf(agent: Agent, room: string): Promise<HistoryEntry[]> {
  const out: HistoryEntry[] = [];
  let after = 0;
  for (;;) {
    const page = await agent.rooms.room(room).history({ order: 'oldest', after, limit: 200 });
    out.push(...page.entries);
    if (!page.more || page.entries.length === 0) return out;
    after = page.entries[page.entries.length - 1]?.seq ?? after;
  }
}

/** The ordinary messages of a room (no membership or room events). */
export async function messagesOf(agent: Agent, room: string) {
  return (await historyOf(agent, room)).filter(
    (e) => e.message.kind === 'message' || e.message.kind === 'status',
  );
}

/** The text of a message. */
export const textOf = (m: { parts: { type: string; text?: string }[] } | undefined) =>
  (m?.parts ?? []).map((p) => (p.type === 'text' ? (p.text ?? '') : '')).join('');

/** A webhook bridge (SAP, Databricks) running as its process would, in a room with alice. */
export interface WebhookBridge {
  world: Awaited<ReturnType<typeof createWorld>>;
  /** A person of the org holding the bridge's tool scope, a member of the room. */
  alice: Member;
  bridgeId: string;
  room: string;
  running: RunningBridge;
  /** The webhook's URL (the bridge's HTTP server, on a free port). */
  url: string;
  /** The messages the bridge stored from source events (those with a `source-id`), oldest first. */
  fromSource(): ReturnType<typeof messagesOf>;
  /** Stops the bridge and closes the world. */
  close(): Promise<void>;
}

/**
 * Starts a webhook bridge the way `parley-bridge` does (startBridge, the adapter's routes, listen,
 * start): an org with `ops` (who owns the bridge agent and creates the room) and `alice` holding
 * `scope`, the bridge agent holding it too, and the room both are in; `mapping` gets the room id.
 */
export async function startWebhookBridge(
  parley: TestParley,
  o: {
    name: string;
    scope: string;
    path: string;
    mapping: (room: string) => string;
    attach: (running: RunningBridge) => void;
  },
): Promise<WebhookBridge> {
  const world = await createWorld(parley);
  const ops = await world.person('ops');
  const alice = await world.person('alice', [o.scope]);
  const b = await world.bridgeAgent(ops, o.name, [o.scope]);
  const room = (await ops.agent.rooms.create(o.name, { members: [b.id, alice.id] })).id;
  const running = await startBridge({
    servers: parley.natsUrl,
    creds: b.creds,
    stateDir: await world.stateDir(),
    log: silentLogger(),
    processMetrics: false,
    mapping: o.mapping(room),
  });
  o.attach(running);
  await running.app.listen({ port: 0, host: '127.0.0.1' });
  const addr = running.app.server.address();
  const url = `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}${o.path}`;
  await running.bridge.start();
  return {
    world,
    alice,
    bridgeId: b.id,
    room,
    running,
    url,
    fromSource: async () =>
      (await messagesOf(alice.agent, room)).filter(
        (m) => m.message.sender.id === b.id && m.message.metadata?.['source-id'],
      ),
    async close() {
      await running.stop();
      await world.close();
    },
  };
}

/** Sends the ingress recognised as retries of a stored message (`parley_messages_total{outcome="duplicate"}`). */
export async function ingressDuplicates(parley: TestParley): Promise<number> {
  const text = await parley.metrics.render();
  return [...text.matchAll(/^parley_messages_total\{[^}]*outcome="duplicate"[^}]*\} (\d+)/gm)].reduce(
    (n, m) => n + Number(m[1]),
    0,
  );
}
