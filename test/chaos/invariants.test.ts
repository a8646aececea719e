/**
 * The chaos test's invariant checks catch what they are for: a second lease holder, an inbox written
 * out of order or by two writers, a message handled twice or out of room order — and accept the
 * histories a healthy run produces.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { InboxChains, LeaseHolders, RoomOrder } from './invariants.js';

describe('chaos invariants', () => {
  it('a lease taken by another replica before the TTL, without a release, is two holders', () => {
    const l = new LeaseHolders(6_000);
    assert.equal(l.write('fanout.1', 'replica-0', 1_000), undefined);
    assert.equal(l.write('fanout.1', 'replica-0', 3_000), undefined, 'renewals');
    assert.match(
      l.write('fanout.1', 'replica-1', 5_000) ?? '',
      /taken by replica-1 2000 ms after replica-0.*two holders/,
    );
    // After expiry (a TTL after the last write) or a release, a new holder is legal.
    assert.equal(l.write('fanout.2', 'replica-0', 1_000), undefined);
    assert.equal(l.write('fanout.2', 'replica-1', 7_000), undefined);
    l.release('fanout.2');
    assert.equal(l.write('fanout.2', 'replica-0', 7_001), undefined);
    assert.equal(l.handovers, 2, 'a write after a release is a fresh start, not a handover');
  });

  it('a write stored on a stale condition supersedes the holder, which is two holders only if it writes again', () => {
    const l = new LeaseHolders(6_000);
    assert.equal(l.write('fanout.4', 'replica-0', 1_000, 10, 9), undefined);
    // replica-1's create (conditional on the delete marker at 9) stored after replica-0's at 10.
    assert.equal(l.write('fanout.4', 'replica-1', 1_003, 11, 9), undefined);
    assert.equal(l.superseded.length, 1);
    assert.match(
      l.superseded[0] ?? '',
      /replica-1's write at revision 11 was conditional on 9, replica-0's at 10/,
    );
    assert.equal(l.write('fanout.4', 'replica-1', 3_000, 12, 11), undefined, "the new holder's renewal");
    // The superseded holder renewing while the other's write is live: two holders.
    assert.match(
      l.write('fanout.4', 'replica-0', 3_500, 13, 10) ?? '',
      /written again by replica-0.*two holders/,
    );
    // A conditional write on the last revision is an ordinary takeover: judged by the TTL.
    assert.equal(l.write('fanout.5', 'replica-0', 1_000, 20, 19), undefined);
    assert.match(
      l.write('fanout.5', 'replica-1', 2_000, 21, 20) ?? '',
      /taken by replica-1 \(revision 21, conditional on 20\) 1000 ms after replica-0 wrote it \(revision 20\).*two holders/,
    );
    // Superseded, then a release: the old holder may take the key again.
    assert.equal(l.write('fanout.6', 'replica-0', 1_000, 30, 29), undefined);
    assert.equal(l.write('fanout.6', 'replica-1', 1_001, 31, 29), undefined);
    l.release('fanout.6');
    assert.equal(l.write('fanout.6', 'replica-0', 2_000, 33, 32), undefined);
  });

  it('after a gap in what the watch read, the next holder is unchecked, and judging starts again', () => {
    const l = new LeaseHolders(6_000);
    l.gap();
    assert.equal(l.gaps, 0, 'a gap before anything was known costs nothing');
    assert.equal(l.write('fanout.1', 'replica-0', 1_000), undefined);
    assert.equal(l.write('fanout.2', 'replica-0', 1_000), undefined);
    l.gap();
    assert.equal(l.write('fanout.1', 'replica-1', 2_000), undefined, 'its release may be in the gap');
    assert.equal(l.write('fanout.2', 'replica-0', 2_500), undefined, 'the same holder after the gap');
    assert.deepEqual([l.gaps, l.unchecked, l.handovers], [1, 1, 0]);
    assert.match(l.write('fanout.1', 'replica-0', 3_000) ?? '', /two holders/, 'judged again after it');
  });

  it('a write conditional on an entry the watch passed over is judged against that entry, read back', () => {
    const l = new LeaseHolders(6_000);
    assert.equal(l.write('fanout.13', 'replica-1', 1_000, 27), undefined);
    // replica-1 gave the key back at 51 and the watch never read it; replica-0 took it at 72.
    assert.equal(l.missed('fanout.13', 27), false, 'conditional on the last entry read');
    assert.equal(l.missed('fanout.13', 51), true);
    l.recover('fanout.13', { revision: 51, at: 3_000 });
    assert.equal(l.write('fanout.13', 'replica-0', 3_158, 72, 51), undefined, 'a takeover after a release');
    assert.equal(l.missed('fanout.13', 72), false);
    assert.equal(
      l.write('fanout.13', 'replica-1', 3_000, 51),
      undefined,
      'read late, after it was read back',
    );
    assert.equal(l.write('fanout.13', 'replica-0', 5_000, 80, 72), undefined, 'replica-0 still holds it');
    // Read back as replica-1's renewal instead: the takeover 158 ms after it is a second holder.
    assert.equal(l.write('fanout.14', 'replica-1', 1_000, 28), undefined);
    assert.ok(l.missed('fanout.14', 52));
    l.recover('fanout.14', { revision: 52, holder: 'replica-1', at: 3_000 });
    assert.match(
      l.write('fanout.14', 'replica-0', 3_158, 73, 52) ?? '',
      /taken by replica-0 \(revision 73, conditional on 52\) 158 ms after replica-1 wrote it \(revision 52\).*two holders/,
    );
    // Read back as the new holder's own earlier write: the handover into it is among the entries
    // passed over, unchecked; and an entry that cannot be read back is a gap for its key only.
    assert.equal(l.write('fanout.15', 'replica-1', 1_000, 29), undefined);
    l.recover('fanout.15', { revision: 53, holder: 'replica-0', at: 2_000 });
    assert.equal(l.write('fanout.15', 'replica-0', 3_000, 74, 53), undefined);
    assert.equal(l.write('fanout.0', 'replica-1', 1_000, 30), undefined);
    assert.equal(l.write('fanout.1', 'replica-1', 1_000, 31), undefined);
    l.recover('fanout.0');
    assert.equal(l.write('fanout.0', 'replica-0', 2_000, 75, 55), undefined);
    assert.match(
      l.write('fanout.1', 'replica-0', 2_000, 76, 31) ?? '',
      /two holders/,
      'other keys still judged',
    );
    assert.deepEqual([l.recovered, l.unchecked, l.gaps], [3, 2, 1]);
  });

  it('an inbox entry at or below the last position, or naming an earlier one than the last, is caught; a hole is counted', () => {
    const c = new InboxChains();
    const s = 'parley.inbox.agt_a.room_b';
    assert.equal(c.entry(s, 10, 0), undefined);
    assert.equal(c.entry(s, 14, 10), undefined);
    assert.match(c.entry(s, 14, 10) ?? '', /position 14 written after 14/);
    assert.match(c.entry(s, 12, 10) ?? '', /position 12 written after 14/);
    assert.match(c.entry(s, 20, 12) ?? '', /names 12 before it, the last written was 14/);
    assert.equal(c.entry('parley.inbox.agt_a.room_c', 11, 0), undefined, 'subjects are independent');
    assert.equal(c.last(s), 20);
    assert.equal(c.holes, 0);
    assert.equal(c.entry(s, 25, 23), undefined, 'a hole: 21–23 refused, 25 stored');
    assert.equal(c.holes, 1);
    assert.match(c.entry(s, 30, 30) ?? '', /names 30 before it/, 'naming itself is no hole');
    assert.equal(c.entries, 8);
  });

  it('an inbox entry going back below a position the room log lost is allowed only when it names the last written', () => {
    const c = new InboxChains();
    const s = 'parley.inbox.agt_a.room_b';
    c.entry(s, 10, 0);
    c.entry(s, 14, 10);
    assert.match(
      c.entry(s, 12, 11, 13) ?? '',
      /position 12 written after 14/,
      'names a position that is not the last',
    );
    assert.equal(c.entry(s, 12, 11, 14), undefined);
    assert.equal(c.last(s), 12, 'the subject goes on from there');
    assert.equal(c.entry(s, 13, 12), undefined);
    assert.match(c.entry(s, 13, 13, 13) ?? '', /written after 13/, 'naming no earlier position');
    assert.equal(c.rewinds, 1);
  });

  it('a message handled twice or out of room order is caught per member and room', () => {
    const o = new RoomOrder();
    assert.equal(o.handled('a', 'r', 3, 'm3'), undefined);
    assert.equal(o.handled('b', 'r', 3, 'm3'), undefined, 'another member');
    assert.equal(o.handled('a', 'r', 7, 'm7'), undefined);
    assert.match(o.handled('a', 'r', 7, 'm7') ?? '', /twice/);
    assert.match(o.handled('a', 'r', 5, 'm5') ?? '', /out of order/);
    assert.equal(o.handled('a', 'r', 6, 'n6', 7), undefined, 'after the room log lost position 7');
    assert.match(o.handled('a', 'r', 6, 'n6') ?? '', /twice/);
    assert.match(o.handled('a', 'r', 5, 'n5', 4) ?? '', /out of order/, 'a lost position below the last');
  });
});
