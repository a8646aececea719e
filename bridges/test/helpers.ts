/** A small org for bridge tests: an admin, people with grants, bridge agents with scopes. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { consentApi, governanceApi, type HistoryEntry } from '@parley/contracts';
import { silentLogger } from '@parley/kit';
import { type Agent, connect } from '@parley/sdk';
import { connectAdmin, createAgent, createHuman, createOrg, type TestParley } from '@parley/test/harness';
import { Registry } from 'prom-client';
import { Bridge } from '../src/bridge.js';
import { type BridgeMapping, loadMapping } from '../src/mapping.js';
import { createBridgeMetrics } from '../src/metrics.js';
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
      const registry = new Registry();
      const m = typeof mapping === 'string' ? loadMapping(mapping) : mapping;
      return new Bridge({
        agent,
        mapping: m,
        state,
        log: silentLogger(),
        metrics: createBridgeMetrics(registry, m.bridge),
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
