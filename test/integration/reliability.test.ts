/**
 * Crash test of the message path: every accepted message is handled exactly once by every member,
 * in room order, while nats-server is killed -9 and restarted under traffic. (The rooms replicas and
 * agent crash tests are in reliability-processes.test.ts: one file each keeps a run on a busy machine
 * within the runner's per-file timeout.)
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  capturingLogger,
  leaseStream,
  reportRecovery,
  startParley,
  type TestParley,
  waitFor,
  whenStreamsAnswer,
  worstDelayAfterRecovery,
} from '@parley/test/harness';
import {
  assertExactlyOnceInOrder,
  logSince,
  type Member,
  member,
  Pace,
  sendMany,
  slowest,
  timed,
  whereMissing,
} from './fixtures/crash.js';

describe('reliability: nats-server killed -9 under traffic', () => {
  let parley: TestParley;
  // The services' lines at info: a slow recovery's report prints the fan-out's since the restart.
  const { log, lines } = capturingLogger('info');
  before(async () => {
    parley = await startParley({ log, backbone: { inboxAckWaitMs: 3_000, leaseTtlMs: 2_000 } });
  });
  after(async () => {
    await parley?.destroy();
  });

  it('10,000 messages, 3 members, 2 rooms, 2 kills: every accepted message handled once by everyone, in order', async () => {
    const members: Member[] = [];
    // Each member receives both rooms: at most 400 accepted messages not yet handled by all.
    const pace = new Pace(members, 400);
    for (let i = 0; i < 3; i++) members.push(await member(parley, () => pace.handled()));
    const [a, b, c] = members as [Member, Member, Member];
    const r1 = await a.agent.rooms.create('r1', { members: [b.id, c.id] });
    const r2 = await b.agent.rooms.create('r2', { members: [a.id, c.id] });
    let acceptedCount = 0;
    const kills: { at: number; restartedMs: number }[] = [];
    let lastRestartAt = 0;
    let streamsBack: Promise<number | undefined> = Promise.resolve(undefined);
    let leasesBack: Promise<number | undefined> = Promise.resolve(undefined);
    const chaos = (async () => {
      for (const threshold of [2_000, 6_000]) {
        await waitFor(() => acceptedCount >= threshold, `${threshold} accepted messages`, 120_000);
        const t0 = Date.now();
        await parley.restartNats({ kill: true });
        lastRestartAt = Date.now();
        streamsBack = whenStreamsAnswer(parley);
        leasesBack = whenStreamsAnswer(parley, [leaseStream]);
        kills.push({ at: acceptedCount, restartedMs: Date.now() - t0 });
      }
    })();
    const onAccepted = () => {
      acceptedCount++;
    };
    const results = await Promise.all([
      sendMany(a.agent, r1.id, 2_500, 8, onAccepted, pace),
      sendMany(b.agent, r1.id, 2_500, 8, onAccepted, pace),
      sendMany(a.agent, r2.id, 2_500, 8, onAccepted, pace),
      sendMany(c.agent, r2.id, 2_500, 8, onAccepted, pace),
    ]);
    await chaos;
    const accepted = new Map([
      [r1.id, [...(results[0]?.accepted ?? []), ...(results[1]?.accepted ?? [])]],
      [r2.id, [...(results[2]?.accepted ?? []), ...(results[3]?.accepted ?? [])]],
    ]);
    const failures = results.flatMap((r) => r.failures);
    const total = [...accepted.values()].reduce((n, ids) => n + ids.length, 0);
    assert.equal(kills.length, 2);
    assert.ok(
      total >= 9_990,
      `only ${total} of 10,000 sends were accepted (${failures.length} failed: ${String(failures[0])})`,
    );
    // Wait for the accepted ids themselves: a send that failed may still have been stored, and its
    // delivery must not stand in for a missing one.
    const seen = (m: Member, room: string) => new Set((m.handled.get(room) ?? []).map((h) => h.id));
    await waitFor(
      () =>
        members.every((m) =>
          [...accepted].every(([room, ids]) => {
            const got = seen(m, room);
            return ids.every((id) => got.has(id));
          }),
        ),
      () =>
        `every member to handle every accepted message (handled ${members
          .map((m) => [...accepted.keys()].map((room) => `${m.handled.get(room)?.length ?? 0}`).join('+'))
          .join(', ')} of ${[...accepted.values()].map((ids) => ids.length).join('+')})`,
      120_000,
    ).catch(async (err: Error) => {
      throw new Error(`${err.message}; ${await whereMissing(parley, members, accepted)}`, { cause: err });
    });
    assertExactlyOnceInOrder(members, accepted);
    console.log(
      `reliability: ${total} accepted, ${failures.length} failed sends, kills at ${kills.map((k) => `${k.at} (restart ${k.restartedMs} ms)`).join(', ')}`,
    );
    // The figure counts from the restart; JetStream electing its leaders is part of it, so the
    // report also says when the streams answered again and the worst delivery counted from then.
    const backAt = await streamsBack;
    const leasesAt = await leasesBack;
    const afterStreamsAnswerMs =
      backAt === undefined ? undefined : worstDelayAfterRecovery(timed(members), backAt);
    await reportRecovery('nats-server kill -9', worstDelayAfterRecovery(timed(members), lastRestartAt), {
      worst: slowest(members, lastRestartAt),
      ...(backAt === undefined
        ? {}
        : {
            streamsAnswerMs: backAt - lastRestartAt,
            afterStreamsAnswerMs,
            // Where the delivery judged against the bound spent its time (ms relative to then).
            worstAfterStreams: slowest(members, backAt),
          }),
      ...(leasesAt === undefined ? {} : { leasesAnswerMs: leasesAt - lastRestartAt }),
    });
    // A slow recovery says where it went: the services' lines since the last restart.
    if ((afterStreamsAnswerMs ?? 0) > 2_000)
      console.log(
        `services since the last restart (ms from it):\n${logSince(lines, lastRestartAt, lastRestartAt).join('\n')}`,
      );
  });
});
