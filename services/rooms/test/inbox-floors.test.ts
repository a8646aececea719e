import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { INBOX_SHARDS } from '@parley/contracts';
import { type ListedConsumer, mergeFloors, shardsOf } from '../src/inbox-floors.js';

const consumer = (name: string, floor: number): ListedConsumer => ({
  name,
  ack_floor: { stream_seq: floor },
});

describe('the inbox floors a shard records', () => {
  it('records each consumer’s floor as the server reports it, and raises it', () => {
    const first = mergeFloors(undefined, [consumer('agt_a', 10), consumer('agt_b', 0)]);
    assert.deepEqual(first, { agt_a: 10 });
    assert.deepEqual(mergeFloors(first, [consumer('agt_a', 25)]), { agt_a: 25 });
  });

  it('keeps the higher floor of a consumer that came back below it (its state lost)', () => {
    const recorded = mergeFloors(undefined, [consumer('agt_a', 500)]);
    // At 0 after a crash, or at an older state: the record stays.
    assert.deepEqual(mergeFloors(recorded, [consumer('agt_a', 0)], 600), { agt_a: 500 });
    assert.deepEqual(mergeFloors(recorded, [consumer('agt_a', 120)], 600), { agt_a: 500 });
    // Made again after the floor, it goes on from there.
    assert.deepEqual(mergeFloors(recorded, [consumer('agt_a', 530)], 600), { agt_a: 530 });
  });

  it('drops a recorded floor past the end of the inbox stream (the stream was made again)', () => {
    const recorded = mergeFloors(undefined, [consumer('agt_a', 500)]);
    assert.deepEqual(mergeFloors(recorded, [consumer('agt_a', 7)], 40), { agt_a: 7 });
    assert.deepEqual(mergeFloors(recorded, [consumer('agt_a', 0)], 40), {});
  });

  it('keeps the floor of a consumer not listed (a cluster lists those whose leaders answer), drops a deregistered participant’s', () => {
    const recorded = mergeFloors(undefined, [consumer('agt_a', 5), consumer('agt_b', 7)]);
    assert.deepEqual(mergeFloors(recorded, [consumer('agt_b', 9)]), { agt_a: 5, agt_b: 9 });
    assert.deepEqual(mergeFloors(recorded, [consumer('agt_b', 9)], undefined, new Set(['agt_a'])), {
      agt_b: 9,
    });
  });

  it('gives every inbox shard to the holder of one partition', () => {
    const all = Array.from({ length: INBOX_SHARDS }, (_, k) => k);
    assert.deepEqual(shardsOf(all, INBOX_SHARDS), all);
    assert.deepEqual(shardsOf([], INBOX_SHARDS), []);
    // Fewer partitions than shards: partition p records shards p, p + n, …
    assert.deepEqual(shardsOf([1], 4), [1, 5, 9, 13]);
    // Two replicas splitting the partitions record every shard once between them.
    const a = shardsOf([0, 2, 4, 6, 8, 10, 12, 14], INBOX_SHARDS);
    const b = shardsOf([1, 3, 5, 7, 9, 11, 13, 15], INBOX_SHARDS);
    assert.deepEqual(
      [...a, ...b].sort((x, y) => x - y),
      all,
    );
  });
});
