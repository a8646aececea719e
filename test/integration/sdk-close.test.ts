/**
 * `agent.close()` ends whatever its connection is doing: a process that closes its agent on the way
 * out (Ctrl-C, a pod's SIGTERM) must not hang there, nor fail, because the backbone is away or the
 * agent's creds were just revoked.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { governanceApi } from '@parley/contracts';
import type { Agent } from '@parley/sdk';
import { DRAIN_TIMEOUT_MS } from '@parley/sdk';
import { startParley, type TestParley, within } from '@parley/test/harness';
import { createWorld } from './fixtures/governance.js';

/** How close() ended, within `ms`: `closed`, `failed: …`, or `still running`. */
async function closeWithin(agent: Agent, ms: number): Promise<string> {
  const closed = agent.close().then(
    () => 'closed',
    (err: unknown) => `failed: ${(err as Error).message}`,
  );
  return within(closed, ms, 'still running');
}

describe('sdk: agent.close()', () => {
  let parley: TestParley;
  before(async () => {
    parley = await startParley();
  });
  after(async () => {
    await parley?.destroy();
  });

  it('ends after the agent’s creds were revoked, wherever its connection is in reconnecting', async () => {
    const world = await createWorld(parley);
    try {
      const owner = await world.person('owner', [], { listen: false });
      // The server drops a revoked user; nats.js tries again, is refused, and gives up. Closed at each
      // status change of that sequence in turn (before the fix, a close while it reconnected never
      // ended, and one just after the drop failed with "connection disconnected").
      const outcomes: string[] = [];
      for (let at = 0; ; at++) {
        const doomed = await world.agentOf(owner, `doomed-${at}`, []);
        const seen: string[] = [];
        const closing = (async () => {
          for await (const s of doomed.agent.nc.status()) {
            seen.push(s.type);
            if (seen.length > at) return closeWithin(doomed.agent, 5_000);
          }
          return 'the connection closed first';
        })();
        await owner.agent.call(governanceApi.revokeCredentials, { participant: doomed.id, reason: 'leaked' });
        const outcome = await closing;
        outcomes.push(`${seen.join(',')}: ${outcome}`);
        if (outcome === 'the connection closed first') break;
        assert.equal(outcome, 'closed', outcomes.join('\n'));
        assert.equal(doomed.agent.nc.isClosed(), true);
      }
      // Every step of the sequence was tried: at least disconnect, reconnecting, an error, a close.
      assert.ok(outcomes.length >= 4, outcomes.join('\n'));
    } finally {
      await world.close();
    }
  });

  it('ends while nats-server is down, within the drain timeout (what was not sent is dropped)', async () => {
    const a = await parley.participant();
    const agent = await parley.connect(a.creds);
    let outcome = '';
    await parley.restartNats({
      whileStopped: async () => {
        outcome = await closeWithin(agent, DRAIN_TIMEOUT_MS + 5_000);
      },
    });
    assert.equal(outcome, 'closed');
    assert.equal(agent.nc.isClosed(), true);
  });
});
