/**
 * Parley on a 3-node JetStream cluster (R3 streams, R1 inbox consumers): kill -9 the leader of the
 * room stream while a participant sends, twice. No accepted message may be lost, none may reach the
 * handler twice, order must hold, and the killed node must rejoin and catch up.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { inboxStream, type SendReply, streams } from '@parley/contracts';
import type { Delivery } from '@parley/sdk';
import {
  reportRecovery,
  startParley,
  type TestParley,
  type TestServer,
  waitFor,
  whenStreamsAnswer,
  worstDelayAfterRecovery,
} from '@parley/test/harness';

const TOTAL = 240;
const KILL_AFTER = [60, 150];
/** How far past a kill point the sender may go before that kill. */
const AHEAD = 20;

describe('rooms on a 3-node JetStream cluster', () => {
  let parley: TestParley;
  before(async () => {
    parley = await startParley({ nodes: 3 });
  });
  after(() => parley?.destroy());

  it('survives kill -9 of the room stream leader during traffic: nothing lost, nothing doubled, order kept, the node catches up', async (t) => {
    const cluster = parley.cluster as TestServer;
    assert.ok(cluster, 'startParley({ nodes: 3 }) runs a cluster');
    const a = await parley.participant();
    const b = await parley.participant();
    const alice = await parley.connect(a.creds);
    const bob = await parley.connect(b.creds);
    const handled: Delivery[] = [];
    const handledAt = new Map<string, number>();
    bob.on('message', (d) => {
      handled.push(d);
      if (!handledAt.has(d.message.id)) handledAt.set(d.message.id, Date.now());
    });
    await bob.listening;
    const room = await alice.rooms.create('failover', { members: [b.id] });

    const nc = await cluster.connect();
    t.after(() => nc.close());
    const jsm = await jetstreamManager(nc, { timeout: 2_000 });
    const roomStream = await jsm.streams.info(streams.rooms);
    assert.equal(roomStream.config.num_replicas, 3, 'the room log is R3');
    assert.equal(roomStream.cluster?.replicas?.length, 2, 'two followers');

    // The sender: one message after another, each retried with its client id until accepted.
    const accepted: SendReply[] = [];
    const acceptedAt = new Map<string, number>();
    let lastRestartAt = 0;
    /** When the room log and the inbox streams answered after the last restart (see below). */
    let streamsBack: Promise<number | undefined> = Promise.resolve(undefined);
    let stopped = false;
    // A send refused for good stops the sender: every wait below then fails with its error at once.
    let sendError: unknown;
    // The sender goes at most AHEAD messages past a kill point until that kill has happened: a kill
    // must come while there are sends still to make. Unpaced, a fast sender had sent all 240 before
    // the second kill (room log at its last position the whole time), and the wait for "a send
    // accepted after the kill" timed out — the "no send accepted within 60 s" of earlier runs.
    let allowed = (KILL_AFTER[0] ?? TOTAL) + AHEAD;
    let release: (() => void) | undefined;
    const sending = (async () => {
      for (let i = 0; i < TOTAL && !stopped; i++) {
        while (i >= allowed && !stopped)
          await new Promise<void>((r) => {
            release = r;
          });
        if (stopped) break;
        const r = await room.send(`m${i}`, { deadlineMs: 60_000 });
        acceptedAt.set(r.id, Date.now());
        accepted.push(r);
      }
    })().catch((err: unknown) => {
      sendError = err;
    });
    const acceptedAtLeast = (n: number) => {
      if (sendError) throw new Error(`the sender stopped: ${String(sendError)}`, { cause: sendError });
      return accepted.length >= n;
    };
    // Leadership moves after a kill: ask until a leader answers.
    const leaderOf = async (name: string, not?: number) => {
      let found = -1;
      await waitFor(
        async () => {
          try {
            found = await cluster.streamLeader(name);
            return found !== not;
          } catch {
            return false;
          }
        },
        `a leader of ${name}`,
        60_000,
      );
      return found;
    };

    const figures: string[] = [];
    try {
      for (const after of KILL_AFTER) {
        await waitFor(() => acceptedAtLeast(after), `${after} accepted messages`, 60_000);
        // Bob's inbox consumer is R1: the node holding it is not the one this test kills (a lost R1
        // consumer pauses that participant's deliveries until its node is back: another scenario).
        const inboxNode = (await jsm.consumers.info(inboxStream(b.id), b.id)).cluster?.leader;
        let leader = await leaderOf(streams.rooms);
        while (`n${leader + 1}` === inboxNode) {
          await nc.request(`$JS.API.STREAM.LEADER.STEPDOWN.${streams.rooms}`, '', { timeout: 5_000 });
          leader = await leaderOf(streams.rooms, leader);
        }
        const before = accepted.length;
        const killedAt = Date.now();
        await cluster.kill9(leader);
        const next = KILL_AFTER[KILL_AFTER.indexOf(after) + 1];
        allowed = next === undefined ? TOTAL : next + AHEAD;
        release?.();
        // What the room log looked like while no send was accepted (printed if none is): whether it
        // had a leader and grew tells JetStream's part from Parley's.
        const seen: string[] = [];
        // And whether the sends reached the ingress at all: its request count (micro STATS), and the
        // node the sender is connected to.
        const ingressRequests = () =>
          nc.request('$SRV.STATS.parley-rooms', '', { timeout: 2_000 }).then(
            (m) =>
              (m.json() as { endpoints?: { name: string; num_requests: number }[] }).endpoints?.find(
                (e) => e.name === 'send',
              )?.num_requests ?? '?',
            (err: Error) => `? (${err.message})`,
          );
        const watch = setInterval(() => {
          const at = Math.round((Date.now() - killedAt) / 1000);
          void Promise.all([
            jsm.streams.info(streams.rooms).then(
              (i) =>
                `leader ${i.cluster?.leader ?? 'none'}, last seq ${i.state.last_seq}, ${(i.cluster?.replicas ?? []).map((r) => `${r.name}${r.current ? '' : ' (not current)'}${r.offline ? ' (offline)' : ''}`).join(', ')}`,
              (err: Error) => err.message,
            ),
            ingressRequests(),
          ]).then(([log, requests]) =>
            seen.push(
              `+${at} s: ${log}; ingress send requests ${requests}; the sender on ${alice.nc.info?.server_name ?? '?'}`,
            ),
          );
        }, 5_000);
        await waitFor(
          () => acceptedAtLeast(before + 2),
          () => `a send accepted after the kill; the room log after it: ${seen.join('; ')}`,
          60_000,
        ).finally(() => clearInterval(watch));
        const recoveredMs = Date.now() - killedAt;
        await leaderOf(streams.rooms, leader);
        // The killed node comes back with its data and catches up with what it missed.
        const restartAt = Date.now();
        await cluster.restart(leader);
        lastRestartAt = Date.now();
        // A node coming back can take the leadership of an inbox stream away for a while (an
        // election): nothing is stored in it until one answers. Reported apart, as for the
        // nats-server kills, so Parley's part of the figure shows.
        streamsBack = whenStreamsAnswer(parley);
        const rejoined = `n${leader + 1}`;
        await waitFor(
          async () => {
            try {
              const info = await jsm.streams.info(streams.rooms);
              const peers = [info.cluster?.leader, ...(info.cluster?.replicas ?? []).map((r) => r.name)];
              return (
                peers.includes(rejoined) &&
                (info.cluster?.replicas ?? []).every((r) => r.current && !r.offline && (r.lag ?? 0) === 0)
              );
            } catch {
              return false;
            }
          },
          `${rejoined} to rejoin and catch up`,
          60_000,
        );
        figures.push(
          `kill -9 of ${rejoined} (leader) after ${before} messages: sends accepted again after ${recoveredMs} ms; restarted node current after ${Date.now() - restartAt} ms`,
        );
      }
      await sending;
      if (sendError) throw sendError;
    } finally {
      stopped = true;
      release?.();
      await sending;
    }

    assert.equal(accepted.length, TOTAL);
    const last = accepted.at(-1)?.id;
    try {
      await waitFor(
        () => handled.some((d) => d.message.id === last),
        'the last message at the handler',
        60_000,
      );
    } catch (err) {
      // Say where the deliveries stopped: the fan-out, the inbox, or the participant's consumer.
      const state = async (what: () => Promise<unknown>) => what().catch((e: Error) => e.message);
      const fanout = await state(async () =>
        (await jsm.consumers.list(streams.rooms).next()).map((c) => ({
          name: c.name,
          pending: c.num_pending,
          ackPending: c.num_ack_pending,
          leader: c.cluster?.leader,
        })),
      );
      const inbox = await state(async () => {
        const c = await jsm.consumers.info(inboxStream(b.id), b.id);
        return {
          pending: c.num_pending,
          ackPending: c.num_ack_pending,
          delivered: c.delivered,
          leader: c.cluster?.leader,
        };
      });
      throw new Error(
        `${(err as Error).message}: ${handled.length} of ${accepted.length} handled; fan-out ${JSON.stringify(fanout)}; inbox consumer ${JSON.stringify(inbox)}; ${figures.join('; ')}`,
      );
    }
    // Deliveries to one participant are in order, so a duplicate of an earlier message would have
    // arrived before the last one.
    const ids = handled.map((d) => d.message.id);
    assert.equal(new Set(ids).size, ids.length, 'no message reached the handler twice');
    assert.deepEqual(
      ids,
      accepted.map((r) => r.id),
      'every accepted message, once, in the order it was accepted',
    );
    assert.deepEqual(
      handled.map((d) => (d.message.parts[0] as { text: string }).text),
      accepted.map((_, i) => `m${i}`),
    );
    const seqs = accepted.map((r) => r.roomSeq);
    assert.ok(
      seqs.every((s, i) => i === 0 || s > (seqs[i - 1] as number)),
      'room sequence numbers only grow',
    );
    const info = await jsm.streams.info(streams.rooms);
    assert.equal(info.cluster?.replicas?.length, 2);
    for (const f of figures) t.diagnostic(f);
    const timed = [...handledAt].map(([id, at]) => ({ acceptedAt: acceptedAt.get(id) ?? at, handledAt: at }));
    const backAt = await streamsBack;
    await reportRecovery('room stream leader kill -9', worstDelayAfterRecovery(timed, lastRestartAt), {
      // Its own cluster, whatever PARLEY_TEST_NODES says.
      nodes: 3,
      ...(backAt === undefined
        ? {}
        : {
            streamsAnswerMs: backAt - lastRestartAt,
            afterStreamsAnswerMs: worstDelayAfterRecovery(timed, backAt),
          }),
    });
    t.diagnostic(`${TOTAL} messages sent and delivered once each, ${KILL_AFTER.length} leader kills`);
  });
});
