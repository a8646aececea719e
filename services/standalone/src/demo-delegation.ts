/**
 * The governance part of the demo: the local admin delegates `repo:read` to the planner, the
 * planner hands the work (and an exchanged token) to the reviewer, the reviewer reads a file with an
 * authorized tool call on the admin's behalf, both agents report model usage, and `parley usage`
 * prints what it cost. Kept apart from demo.ts, which only calls these hooks.
 */
import { governanceApi, type RoomMessage, registryApi } from '@parley/contracts';
import { type Agent, connect } from '@parley/sdk';
import { runCli } from '@parley/sdk/cli';
import type { Home } from './home.js';

const SCOPE = 'repo:read';

/** Hooks the demo calls at each step. */
export interface DemoDelegation {
  /** The token the planner hands to the reviewer with the plan. */
  handover(planner: Agent, room: string): Promise<string>;
  /** The reviewer reads the plan's file with a delegated tool call before reviewing. */
  readForReview(reviewer: Agent, message: RoomMessage): Promise<void>;
  /** Both agents report what the demo's model calls cost; then `parley usage` is printed. */
  reportAndPrintUsage(planner: Agent, reviewer: Agent): Promise<void>;
  close(): Promise<void>;
}

/** Prepares the admin's grant and the agents' cards (idempotent: later starts reuse them). */
export async function demoDelegation(o: {
  natsUrl: string;
  home: Home;
  ids: { planner: string; reviewer: string };
  out: (line: string) => void;
}): Promise<DemoDelegation> {
  const admin = await connect({ servers: o.natsUrl, creds: o.home.paths.adminCreds, presence: false });
  const me = o.home.state.admin.id;
  const may = await admin.call(governanceApi.authorize, { action: SCOPE });
  if (!may.allow) await admin.call(governanceApi.setGrants, { participant: me, scopes: [SCOPE] });
  // Homes made before delegation existed have demo agents whose cards list no scopes.
  for (const id of [o.ids.planner, o.ids.reviewer]) {
    const { agent } = await admin.call(registryApi.getAgent, { agent: id });
    if (!agent.card.scopes.includes(SCOPE)) {
      await admin.call(registryApi.updateAgent, {
        agent: id,
        revision: agent.revision,
        card: { ...agent.card, scopes: [...agent.card.scopes, SCOPE] },
      });
    }
  }
  return {
    async handover(planner, room) {
      const issued = await admin.tokens.issue(o.ids.planner, [SCOPE], { ttlSeconds: 600 });
      const passed = await planner.tokens.exchange(issued.token, o.ids.reviewer, { room });
      o.out(
        `demo  admin delegates ${SCOPE} to the planner (${issued.jti}); the planner hands it to the reviewer (${passed.jti})`,
      );
      return passed.token;
    },
    async readForReview(reviewer, message) {
      const file = 'deploy/billing-rollout.yaml';
      // Inside the handler the token the plan handed over is used: the call is on the admin's behalf.
      await reviewer.tools.call(
        'repo.read',
        { path: file },
        async () => `# ${file}\nsteps: [deploy-v2, switch-traffic, remove-v1]\n`,
        { action: SCOPE },
      );
      const obo = message.onBehalfOf;
      o.out(
        `demo  reviewer reads ${file} for ${obo?.principal ?? 'nobody'} (chain ${obo?.chain.join(' → ') ?? '-'}): tool call allowed`,
      );
    },
    async reportAndPrintUsage(planner, reviewer) {
      await planner.usage.report({
        model: 'demo-model',
        inputTokens: 850,
        outputTokens: 120,
        costUsd: 0.0031,
      });
      await reviewer.usage.report({
        model: 'demo-model',
        inputTokens: 1240,
        outputTokens: 310,
        costUsd: 0.0052,
      });
      o.out('demo  parley usage:');
      await runCli(['usage', '--server', o.natsUrl, '--as', o.home.paths.adminCreds], {
        out: (line) => {
          for (const l of line.split('\n')) o.out(`      ${l}`);
        },
        err: (line) => o.out(`      ${line}`),
      });
    },
    close: () => admin.close(),
  };
}
