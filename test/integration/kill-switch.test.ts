/**
 * The kill switch across two ingress replicas (separate processes, as in Kubernetes): after
 * `suspend`, every replica refuses the agent's sends within a second — measured — its tool calls
 * are denied, its owner is told, and `resume` lets it talk again.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createInbox, type NatsConnection } from '@nats-io/transport-node';
import { governanceApi, isParleyError, ParleyEvent } from '@parley/contracts';
import { mintResponderCreds } from '@parley/keys';
import {
  connectService,
  type ServiceProcess,
  startParley,
  startRoomsProcess,
  stopProcesses,
  type TestParley,
  waitFor,
} from '@parley/test/harness';
import { auditRecords, codeOf, createWorld, type Member, textOf } from './fixtures/governance.js';

interface SendStats {
  name: string;
  metadata?: Record<string, string>;
  endpoints: { name: string; num_requests: number; num_errors: number; last_error: string }[];
}

/** `$SRV.STATS` of every parley-rooms instance that serves the ingress, by replica id. */
async function ingressStats(
  nc: NatsConnection,
  replicas: number,
): Promise<Map<string, SendStats['endpoints'][number]>> {
  const inbox = createInbox('_INBOX.svc_test');
  const out = new Map<string, SendStats['endpoints'][number]>();
  const sub = nc.subscribe(inbox, {
    callback: (_e, m) => {
      const s = m.json<SendStats>();
      const send = s.endpoints.find((e) => e.name === 'send');
      if (send) out.set(s.metadata?.replica ?? '?', send);
    },
  });
  nc.publish('$SRV.STATS.parley-rooms', '', { reply: inbox });
  await waitFor(() => out.size >= replicas, 'stats of every ingress replica', 5_000);
  sub.unsubscribe();
  return out;
}

describe('kill switch across two ingress replicas', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  const replicas: ServiceProcess[] = [];
  let world: Awaited<ReturnType<typeof createWorld>>;
  let owner: Member;
  let bot: Member;
  let room: string;

  before(async () => {
    // The in-process rooms service keeps the control plane and the fan-out; the ingress runs only
    // in two separate processes.
    parley = await startParley({ rooms: { PARLEY_INGRESS: false } });
    svc = await connectService(parley);
    // As deployed: requests are answered on a connection that may publish only replies.
    const responderFile = join(parley.home.paths.credsDir, 'rooms-ingress-responder.creds');
    await writeFile(responderFile, (await mintResponderCreds(parley.home.keys, 'rooms')).creds, {
      mode: 0o600,
    });
    for (const i of [0, 1]) {
      replicas.push(
        await startRoomsProcess(parley, `ingress-${i}`, {
          NATS_RESPONDER_CREDS: responderFile,
          PARLEY_FANOUT: 'false',
        }),
      );
    }
    world = await createWorld(parley);
    owner = await world.person('owner', ['tickets:*']);
    bot = await world.agentOf(owner, 'worker', ['tickets:*']);
    room = (await owner.agent.rooms.create('ops', { members: [bot.id] })).id;
  });
  after(async () => {
    await world?.close();
    // Each replica must stop cleanly on SIGTERM, as a pod does on a rollout (before nats-server goes).
    const failed = await stopProcesses(replicas).then(
      () => undefined,
      (err: unknown) => err,
    );
    await svc?.close();
    await parley?.destroy();
    if (failed) throw failed;
  });

  /** Sends until `streak` sends in a row are refused; returns when the last accepted reply came. */
  async function sendUntilRefused(streak: number): Promise<{ lastAcceptedAt: number; codes: Set<string> }> {
    let lastAcceptedAt = 0;
    let refusedInRow = 0;
    const codes = new Set<string>();
    for (let i = 0; refusedInRow < streak; i++) {
      try {
        await bot.agent.rooms.room(room).send(`tick ${i}`, { deadlineMs: 0 });
        lastAcceptedAt = performance.now();
        refusedInRow = 0;
      } catch (err) {
        codes.add(isParleyError(err) ? err.code : String(err));
        refusedInRow++;
      }
      if (i > 20_000) throw new Error('the suspension never took effect');
    }
    return { lastAcceptedAt, codes };
  }

  it('refuses the agent on every replica within a second, denies its tools, tells its owner; resume undoes it', async () => {
    const events: ParleyEvent[] = [];
    const sub = svc.subscribe('parley.evt.governance.>', {
      callback: (_e, m) => {
        events.push(ParleyEvent.parse(m.json()));
      },
    });
    await svc.flush();
    const before = await ingressStats(svc, 2);
    const rounds: { effectMs: number; apiMs: number }[] = [];
    for (let round = 0; round < 5; round++) {
      // Both replicas accept the agent (many sends, so each got some).
      for (let i = 0; i < 20; i++) await bot.agent.rooms.room(room).send(`warm ${round}.${i}`);
      const sending = (async () => {
        // Keep sending from before the suspension until 40 in a row are refused.
        return sendUntilRefused(40);
      })();
      const t0 = performance.now();
      await owner.agent.call(governanceApi.suspend, { agent: bot.id, reason: `drill ${round}` });
      const apiMs = performance.now() - t0;
      const { lastAcceptedAt, codes } = await sending;
      assert.deepEqual([...codes], ['SUSPENDED']);
      rounds.push({ effectMs: Math.max(0, lastAcceptedAt - t0), apiMs });
      await owner.agent.call(governanceApi.resume, { agent: bot.id, reason: 'drill over' });
      await waitFor(
        () =>
          bot.agent.rooms
            .room(room)
            .send('back?', { deadlineMs: 0 })
            .then(
              () => true,
              () => false,
            ),
        'sends to work again',
        2_000,
      );
    }
    sub.unsubscribe();
    const effects = rounds.map((r) => r.effectMs).sort((a, b) => a - b);
    console.log(
      `suspend-to-effect over 2 ingress replicas (last accepted send after the suspend call started), 5 rounds: ${effects.map((e) => `${e.toFixed(1)} ms`).join(', ')}; suspend API ${rounds.map((r) => r.apiMs.toFixed(1)).join(', ')} ms`,
    );
    for (const r of rounds) assert.ok(r.effectMs < 1_000, `took ${r.effectMs} ms`);

    // Each replica refused some of the sends itself (its own watch saw the suspension).
    const afterStats = await ingressStats(svc, 2);
    for (const [replica, s] of afterStats) {
      assert.ok(s.num_errors > (before.get(replica)?.num_errors ?? 0), `${replica} refused nothing`);
    }

    // Suspended: its tool calls are denied too.
    await owner.agent.call(governanceApi.suspend, { agent: bot.id, reason: 'for good measure' });
    let ran = false;
    const denied = bot.agent.tools.call(
      'tickets.close',
      { id: 1 },
      () => {
        ran = true;
      },
      { action: 'tickets:close' },
    );
    assert.equal(await codeOf(denied), 'SUSPENDED');
    assert.equal(ran, false);

    // The owner was told, in its notices room; events and audit records were written.
    await waitFor(() => owner.got.some((d) => /was suspended/.test(textOf(d))), 'the owner’s notice');
    const notice = owner.got.find((d) => /was suspended/.test(textOf(d)));
    assert.equal(notice?.message.sender.id, 'svc_governance');
    assert.ok(
      events.some((e) => e.kind === 'suspended' && e.subject === bot.id && e.data.owner === owner.id),
    );
    assert.ok(events.some((e) => e.kind === 'resumed' && e.subject === bot.id));
    const audits = await auditRecords(svc, 'suspension');
    assert.ok(audits.filter((a) => a.target === bot.id && a.action === 'suspend').length >= 6);

    await owner.agent.call(governanceApi.resume, { agent: bot.id });
    await waitFor(
      () =>
        bot.agent.rooms
          .room(room)
          .send('resumed', { deadlineMs: 0 })
          .then(
            () => true,
            () => false,
          ),
      'sends to work again',
      2_000,
    );
    assert.equal(
      await bot.agent.tools.call('tickets.close', { id: 1 }, () => 'closed', { action: 'tickets:close' }),
      'closed',
    );
  });

  it('only the owner or an admin may suspend; a revoked agent stays revoked', async () => {
    const stranger = await world.person('stranger');
    assert.equal(
      await codeOf(stranger.agent.call(governanceApi.suspend, { agent: bot.id, reason: 'no' })),
      'PERMISSION_DENIED',
    );
    assert.equal(
      await codeOf(bot.agent.call(governanceApi.suspend, { agent: bot.id, reason: 'me' })),
      'UNAUTHENTICATED',
    );
    await bot.agent.rooms.room(room).send('still fine');
    const doomed = await world.agentOf(owner, 'doomed', []);
    await owner.agent.call(governanceApi.revokeCredentials, { participant: doomed.id, reason: 'leaked' });
    assert.equal(
      await codeOf(owner.agent.call(governanceApi.suspend, { agent: doomed.id, reason: 'x' })),
      'REVOKED',
    );
    assert.equal(await codeOf(owner.agent.call(governanceApi.resume, { agent: doomed.id })), 'REVOKED');
  });
});
