import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isParleyError, newId } from '@parley/contracts';
import { rateLimitGuard } from '../src/guards/rate-limit.js';
import { TokenBuckets } from '../src/guards/token-bucket.js';
import type { RoomRecord } from '../src/room-store.js';
import { createRunawayDetector } from '../src/runaway.js';

const room = (id = newId('room')) => ({ id }) as RoomRecord;
const send = (sender: string, r: RoomRecord) => ({
  sender,
  room: r,
  request: {} as Parameters<ReturnType<typeof rateLimitGuard>['admit']>[0]['request'],
});

describe('token buckets', () => {
  it('allow a burst, then the rate, and say how long to wait', () => {
    const b = new TokenBuckets({ ratePerSec: 10, burst: 3 });
    const t = 1_000;
    assert.deepEqual([b.take('a', t), b.take('a', t), b.take('a', t)], [0, 0, 0]);
    assert.equal(b.take('a', t), 100, 'one token every 100 ms');
    assert.equal(b.take('a', t + 50), 50);
    assert.equal(b.take('a', t + 100), 0, 'refilled');
    assert.equal(b.take('b', t), 0, 'keys are independent');
  });

  it('forget idle keys instead of growing without bound', () => {
    const b = new TokenBuckets({ ratePerSec: 1, burst: 1 }, 100);
    for (let i = 0; i < 1_000; i++) b.take(`k${i}`, i * 10_000);
    assert.ok(b.size <= 100, `${b.size} buckets kept`);
  });
});

describe('rate-limit guard', () => {
  it('gives each of N ingress replicas 1/N of the limits, and follows N as it changes', () => {
    let listener: (n: number) => void = () => undefined;
    const guard = rateLimitGuard({
      agent: { ratePerSec: 10, burst: 4 },
      room: { ratePerSec: 0, burst: 1 },
      replicas: { count: () => 2, onChange: (l) => (listener = l) },
    });
    const r = room();
    const admitted = (agent: string) => {
      let n = 0;
      for (let i = 0; i < 10; i++) {
        try {
          guard.admit(send(agent, r));
          n++;
        } catch (err) {
          assert.ok(isParleyError(err, 'RATE_LIMITED'));
          assert.ok((err.retryAfterMs ?? 0) > 0);
          assert.equal(err.details?.limit, 'agent');
        }
      }
      return n;
    };
    assert.equal(admitted(newId('agent')), 2, 'half of a burst of 4 with two replicas');
    listener(1);
    assert.equal(admitted(newId('agent')), 4, 'the whole burst once it is the only replica');
  });

  it('limits rooms for everyone and agents only per agent; a refused room send gives the agent its token back', () => {
    const guard = rateLimitGuard({
      agent: { ratePerSec: 1, burst: 2 },
      room: { ratePerSec: 1, burst: 2 },
      replicas: { count: () => 1, onChange: () => undefined },
    });
    const human = newId('user');
    const agent = newId('agent');
    const busy = room();
    guard.admit(send(human, busy));
    guard.admit(send(human, busy));
    assert.throws(
      () => guard.admit(send(agent, busy)),
      (e) => isParleyError(e, 'RATE_LIMITED') && e.details?.limit === 'room',
    );
    // The agent's own bucket was not charged for the refused send.
    const quiet = room();
    guard.admit(send(agent, quiet));
    guard.admit(send(agent, quiet));
    assert.throws(
      () => guard.admit(send(agent, quiet)),
      (e) => isParleyError(e, 'RATE_LIMITED') && e.details?.limit === 'agent',
    );
  });
});

describe('runaway detector', () => {
  const a1 = newId('agent');
  const a2 = newId('agent');
  const human = newId('user');

  it('trips on more than N agent messages within T with no human message, once, until a resume', () => {
    const trips: string[] = [];
    const d = createRunawayDetector({ messages: 3, windowMs: 1_000, onTrip: (r) => trips.push(r) });
    const r = newId('room');
    let seq = 0;
    const say = (sender: string, at: number, kind = 'message', change?: string) =>
      d.observe({ room: r, seq: ++seq, kind, sender, at, change });
    say(a1, 0);
    say(a2, 10);
    say(a1, 20);
    say(human, 30); // a human message resets the count
    say(a1, 40);
    say(a2, 50);
    say(a1, 60);
    assert.deepEqual(trips, []);
    say(a2, 70);
    assert.deepEqual(trips, [r]);
    say(a1, 80);
    assert.equal(trips.length, 1, 'tripped once');
    say('svc_rooms', 90, 'room', 'resumed');
    for (let i = 0; i < 3; i++) say(a1, 100 + i);
    assert.equal(trips.length, 1, 'the count starts again after a resume');
  });

  it('only counts messages within the window', () => {
    const trips: string[] = [];
    const d = createRunawayDetector({ messages: 3, windowMs: 1_000, onTrip: (r) => trips.push(r) });
    const r = newId('room');
    for (let i = 0; i < 20; i++) d.observe({ room: r, seq: i + 1, kind: 'message', sender: a1, at: i * 400 });
    assert.deepEqual(trips, [], 'three messages per second at most: never more than 3 in a window');
  });
});
