/**
 * The chaos test's lease watch and its one blind spot: the lease bucket's entries expire a TTL after
 * they were written (the bucket's stream has that max age), so a watch away longer than the TTL —
 * JetStream without leaders for 10 s after a kill -9 — misses the release of a handover and then
 * sees the next holder's create as if the key had two holders (a long chaos run reported 8 such
 * "two holders", each 0.4–1.2 s after a logged give-back). The watch must notice the gap instead:
 * it drops what it knew, and the next holder is counted as unchecked, not judged.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { startServer, type TestServer, waitFor } from '@parley/test/harness';
import { follow } from './follow.js';
import { LeaseHolders } from './invariants.js';

describe('chaos lease watch across entries that expired unread', () => {
  let server: TestServer;
  let nc: NatsConnection;
  before(async () => {
    server = await startServer();
    nc = await server.connect();
  });
  after(async () => {
    await nc?.close();
    await server?.stop();
  });

  it('a handover whose release expired before the watch read it is a gap, not two holders', async () => {
    // Long enough that a watch which keeps up on a loaded machine never reads an entry about to expire.
    const TTL = 5_000;
    const kv = await new Kvm(nc).create('chaos_follow', { ttl: TTL, history: 64 });
    const stream = 'KV_chaos_follow';
    const jsm = await jetstreamManager(nc);
    const js = jetstream(nc);
    const prefix = '$KV.chaos_follow.';
    const violations: string[] = [];
    const gaps: [number, number][] = [];
    const leases = new LeaseHolders(TTL);
    let lastSeq = 0;
    const watch = (running: () => boolean, from: number) =>
      follow(
        js,
        stream,
        `${prefix}fanout.*`,
        running,
        (m) => {
          lastSeq = m.seq;
          const key = m.subject.slice(prefix.length);
          if (m.headers?.get('KV-Operation')) leases.release(key);
          else {
            const broken = leases.write(key, m.string(), m.info.timestampNanos / 1e6);
            if (broken) violations.push(broken);
          }
        },
        {
          from,
          gaps: {
            jsm,
            onGap: (f, first) => {
              gaps.push([f, first]);
              leases.gap();
            },
          },
        },
      );

    // Holder A writes the key twice; the watch reads both, then goes away.
    let first = true;
    const firstWatch = watch(() => first, 1);
    let rev = await kv.put('fanout.0', 'replica-a');
    rev = await kv.update('fanout.0', 'replica-a', rev);
    await waitFor(() => lastSeq >= rev, 'the watch to read holder A');
    first = false;
    await firstWatch;
    assert.deepEqual(gaps, [], 'a watch that keeps up sees no gap');

    // A hands over (release), B takes the key and keeps renewing it while the watch is away.
    await kv.delete('fanout.0', { previousSeq: rev });
    let bRev = await kv.create('fanout.0', 'replica-b');
    const releaseSeq = bRev - 1;
    let renewing: Promise<void> = Promise.resolve();
    const renew = setInterval(() => {
      renewing = renewing.then(async () => {
        bRev = await kv.update('fanout.0', 'replica-b', bRev);
      });
    }, TTL / 10);
    try {
      await waitFor(
        async () => (await jsm.streams.info(stream)).state.first_seq > releaseSeq,
        'the release to expire from the lease stream',
        TTL * 5,
      );
      // The watch comes back where it stopped: the release is gone, B's writes are there.
      let second = true;
      const resumedAt = lastSeq + 1;
      const secondWatch = watch(() => second, resumedAt);
      await waitFor(() => leases.unchecked > 0 || violations.length > 0, 'the watch to read holder B');
      second = false;
      await secondWatch;
      assert.equal(gaps[0]?.[0], resumedAt, 'the gap starts where the watch resumed');
    } finally {
      clearInterval(renew);
      await renewing;
    }
    assert.deepEqual(violations, [], 'no "two holders" for a handover whose release expired unread');
    assert.equal(gaps.length, 1, 'the gap is reported once');
    assert.ok((gaps[0]?.[1] ?? 0) > releaseSeq, 'the first sequence had moved past the release');
    assert.equal(leases.gaps, 1);
    assert.equal(leases.unchecked, 1, 'the holder change across the gap is counted, unchecked');
    assert.equal(leases.handovers, 0, 'and not judged as a handover');
  });
});
