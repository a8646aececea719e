import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { inLogOrder } from '../src/fanout.js';

/** A pushed room-log entry: its position and which push it came from. */
const pushed = (seq: number, copy = 1) => ({ seq, copy });

describe('a fan-out batch', () => {
  it('is handled as it came when its positions grow', () => {
    const batch = [pushed(3), pushed(4), pushed(9)];
    assert.equal(inLogOrder(batch), batch);
  });

  it('holds each position once, the copy pushed last, in log order, when the consumer pushed entries again', () => {
    // The consumer's leader changed while 268–270 waited: the next leader pushed 269 and 270 again.
    const batch = [pushed(268), pushed(269), pushed(270), pushed(269, 2), pushed(270, 2), pushed(271)];
    assert.deepEqual(inLogOrder(batch), [pushed(268), pushed(269, 2), pushed(270, 2), pushed(271)]);
  });

  it('is put in log order when a position came after a later one', () => {
    assert.deepEqual(inLogOrder([pushed(270), pushed(269)]), [pushed(269), pushed(270)]);
  });
});
