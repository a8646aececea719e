import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { headers } from '@nats-io/nats-core';
import { MsgHdrsImpl } from '@nats-io/nats-core/internal';

import { headerNames, headerOf, natsHeadersGetter, setHeader } from '@parley/contracts';

const dec = new TextDecoder();

describe('header fast paths', () => {
  it('write the same bytes on the wire as nats.js set', () => {
    const ours = new MsgHdrsImpl();
    const theirs = new MsgHdrsImpl();
    const values: [string, string][] = [
      [headerNames.messageId, 'msg_01K0'],
      [headerNames.traceparent, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'],
      [headerNames.roomSeq, '42'],
      [headerNames.msgId, 'msg_01K0:agt_1'],
      [headerNames.roomSeq, '43'],
    ];
    for (const [k, v] of values) {
      setHeader(ours, k, v);
      theirs.set(k, v);
    }
    assert.equal(dec.decode(ours.encode()), dec.decode(theirs.encode()));
    assert.equal(ours.get(headerNames.roomSeq), '43');
  });

  it('refuse a value nats.js refuses, and trim what it trims', () => {
    const h = headers();
    assert.throws(() => setHeader(h, headerNames.sender, 'agt_1\r\nParley-Kind: room'), /\\r or \\n/);
    assert.equal(h.has(headerNames.kind), false);
    setHeader(h, headerNames.sender, ' agt_1 ');
    assert.equal(h.get(headerNames.sender), 'agt_1');
  });

  it('read what arrived on the wire, absent and empty alike as undefined', () => {
    const wire = new TextEncoder().encode(
      'NATS/1.0\r\nParley-Room-Seq: 7\r\nParley-Prev-Seq:\r\nTraceParent: 00-aa\r\n\r\n',
    );
    const h = MsgHdrsImpl.decode(wire);
    assert.equal(headerOf(h, headerNames.roomSeq), '7');
    assert.equal(headerOf(h, headerNames.prevSeq), undefined);
    assert.equal(headerOf(h, headerNames.rewound), undefined);
    assert.equal(headerOf(undefined, headerNames.roomSeq), undefined);
    // A bridge that changed a trace header's case is still understood, and an absent one is absent.
    assert.equal(natsHeadersGetter.get(h, headerNames.traceparent), '00-aa');
    assert.equal(natsHeadersGetter.get(h, headerNames.tracestate), undefined);
  });

  it('fall back to the MsgHdrs methods for another implementation', () => {
    const seen = new Map<string, string>();
    const other = {
      get: (k: string) => seen.get(k) ?? '',
      set: (k: string, v: string) => void seen.set(k, v),
    };
    setHeader(other, headerNames.kind, 'message');
    assert.equal(headerOf(other, headerNames.kind), 'message');
    assert.equal(headerOf(other, headerNames.sender), undefined);
  });
});
