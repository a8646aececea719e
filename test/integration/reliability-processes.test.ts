/**
 * Crash tests of the message path's processes: rooms replicas (ingress + fan-out) and an agent killed
 * -9 under traffic; every accepted message is handled exactly once by every member, in room order.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  reportRecovery,
  type ServiceProcess,
  startParley,
  startRoomsProcess,
  type TestParley,
  waitFor,
  worstDelayAfterRecovery,
} from '@parley/test/harness';
import {
  assertExactlyOnceInOrder,
  logSince,
  type Member,
  member,
  sendMany,
  slowest,
  timed,
} from './fixtures/crash.js';

describe('reliability: rooms replicas killed -9 under traffic', () => {
  let parley: TestParley;
  const replicas: (ServiceProcess | undefined)[] = [];
  /** Every replica process started, the killed ones included (their logs explain a slow takeover). */
  const started: ServiceProcess[] = [];

  before(async () => {
    // The in-process rooms service only serves the control plane; two separate processes run the
    // ingress and the fan-out, and those are what gets killed.
    parley = await startParley({
      backbone: { inboxAckWaitMs: 3_000, leaseTtlMs: 1_500 },
      rooms: { PARLEY_INGRESS: false, PARLEY_FANOUT: false },
    });
  });
  after(async () => {
    await Promise.allSettled(replicas.map((r) => r?.kill9()));
    await parley?.destroy();
  });

  const startReplica = async (i: number) => {
    const replica = await startRoomsProcess(parley, `replica-${i}`, {
      PARLEY_LEASE_TTL_MS: '1500',
      LOG_LEVEL: 'info',
    });
    started.push(replica);
    return replica;
  };

  /** The replicas' log lines from `since` on (ms relative to `zero`), oldest first. */
  const replicaLog = (since: number, zero: number) =>
    logSince(
      started.flatMap((r) => r.output().split('\n')),
      since,
      zero,
    );

  it('4 kills across two replicas: lease takeover, no loss, no duplicate, no reordering', async () => {
    replicas[0] = await startReplica(0);
    replicas[1] = await startReplica(1);
    const members = [await member(parley), await member(parley), await member(parley)];
    const [a, b, c] = members as [Member, Member, Member];
    const room = await a.agent.rooms.create('replicas', { members: [b.id, c.id] });
    let acceptedCount = 0;
    const kills: number[] = [];
    let lastRestartAt = 0;
    let lastKillAt = 0;
    const chaos = (async () => {
      for (let k = 0; k < 4; k++) {
        const target = k % 2;
        await waitFor(() => acceptedCount >= 600 * (k + 1), `${600 * (k + 1)} accepted`, 120_000);
        await replicas[target]?.kill9();
        lastKillAt = Date.now();
        kills.push(acceptedCount);
        replicas[target] = await startReplica(target);
        lastRestartAt = Date.now();
      }
    })();
    const results = await Promise.all([
      sendMany(a.agent, room.id, 1_500, 4, () => acceptedCount++),
      sendMany(b.agent, room.id, 1_500, 4, () => acceptedCount++),
    ]);
    await chaos;
    const accepted = new Map([[room.id, results.flatMap((r) => r.accepted)]]);
    const failures = results.flatMap((r) => r.failures);
    assert.equal(kills.length, 4);
    assert.equal(failures.length, 0, `sends failed: ${String(failures[0])}`);
    await waitFor(
      () => members.every((m) => (m.handled.get(room.id)?.length ?? 0) >= 3_000),
      'every member to handle every accepted message',
      120_000,
    );
    assertExactlyOnceInOrder(members, accepted);
    console.log(`replica kills at ${kills.join(', ')} accepted messages; 3,000 accepted, 0 failed`);
    // Where the worst delivery spent its time (ms relative to the restart): a late `accepted` is the
    // ingress, a late `inboxed` the fan-out's lease takeover, a late `handled` the recipient.
    const worstMs = worstDelayAfterRecovery(timed(members), lastRestartAt);
    await reportRecovery('rooms replicas kill -9', worstMs, {
      worst: slowest(members, lastRestartAt),
      restartMs: lastRestartAt - lastKillAt,
    });
    // A slow recovery says where it went: the replicas' lease and worker lines since the last kill.
    if (worstMs > 2_000)
      console.log(
        `replicas since the last kill (ms from the restart):\n${replicaLog(lastKillAt, lastRestartAt).join('\n')}`,
      );
  });
});

describe('reliability: an agent killed -9 mid-stream', () => {
  let parley: TestParley;
  let dir = '';
  before(async () => {
    parley = await startParley({ backbone: { inboxAckWaitMs: 2_000 } });
    dir = await mkdtemp(join(tmpdir(), 'parley-agent-'));
  });
  after(async () => {
    await parley?.destroy();
    await rm(dir, { recursive: true, force: true });
  });

  it('resumes where it stopped after a restart: nothing lost, in order, nothing handled twice', async () => {
    const sender = await member(parley);
    const target = await parley.participant();
    const credsFile = join(dir, 'agent.creds');
    const record = join(dir, 'handled.log');
    await writeFile(credsFile, target.creds);
    const env = {
      NATS_URL: parley.natsUrl,
      CREDS: credsFile,
      RECORD_FILE: record,
      HANDLER_MS: '3',
    };
    const lines = async () => (await readFile(record, 'utf8').catch(() => '')).split('\n').filter(Boolean);
    const room = await sender.agent.rooms.create('crash', { members: [target.id] });
    const sent: string[] = [];
    for (let i = 0; i < 400; i++) sent.push((await room.send(`n${i}`)).id);
    // Started once everything is queued, so it is mid-stream whatever the send rate (on a 3-node
    // cluster sending is slower, and an agent started first kept up and finished before the kill).
    let agent = await startAgentProcess(env);
    await waitFor(async () => (await lines()).length >= 100, 'the agent to be mid-stream');
    await agent.kill9();
    const atKill = (await lines()).length;
    assert.ok(atKill < 400, 'the agent finished before it was killed');
    agent = await startAgentProcess(env);
    const restartedAt = Date.now();
    await waitFor(
      async () => (await lines()).length >= 400,
      'the restarted agent to handle the rest',
      60_000,
    );
    // Every message was accepted before the restart: the last one handled is the worst.
    await reportRecovery('agent kill -9', Date.now() - restartedAt);
    await agent.kill9();
    const handled = (await lines()).map((l) => l.split(' '));
    assert.deepEqual(
      handled.map((h) => h[2]),
      sent,
      'every message once, in order',
    );
    console.log(`agent killed after ${atKill} of 400 handled; the restart handled the other ${400 - atKill}`);
  });
});

function startAgentProcess(env: Record<string, string>): Promise<{ kill9(): Promise<void> }> {
  const child = spawn(process.execPath, ['test/integration/fixtures/recording-agent.ts'], {
    cwd: resolve(import.meta.dirname, '../..'),
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return new Promise((resolveStart, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      if (out.includes('listening')) {
        resolveStart({
          async kill9() {
            child.kill('SIGKILL');
            await exited;
          },
        });
      }
    });
    child.stderr.on('data', (d) => {
      out += d;
    });
    child.once('exit', (code) => reject(new Error(`agent exited (${code}) before listening:\n${out}`)));
  });
}
