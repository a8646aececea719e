import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { refusedReply } from '@parley/kit';

describe('refusedReply: a service answers only its caller', () => {
  const caller = 'agt_01M8RCP1TECMXN1CFJDDK8T6B8';
  const subject = `parley.in.${caller}.api.rooms.get`;

  it('allows the caller’s own reply prefix, for participants and services alike', () => {
    assert.equal(refusedReply(subject, `_INBOX.${caller}.nuid.1`), undefined);
    assert.equal(refusedReply(subject, `_INBOX.${caller}.x`), undefined);
    assert.equal(refusedReply('parley.in.svc_rooms.api.consent.check', '_INBOX.svc_rooms.abc.2'), undefined);
    // The services protocol's discovery (participants may not publish `$SRV.*`).
    assert.equal(refusedReply('$SRV.PING', '_INBOX.anyone.1'), undefined);
  });

  it('refuses every other reply subject, including look-alike prefixes', () => {
    for (const reply of [
      `$KV.parley_policy.participant.${caller}`,
      `parley.inbox.agt_01M8RCP1TECMXN1CFJDDK8T6B9.room_x`,
      'parley.room.3.room_x',
      'parley.in.agt_01M8RCP1TECMXN1CFJDDK8T6B9.api.rooms.close',
      'parley.evt.consent.requested',
      '_INBOX.agt_01M8RCP1TECMXN1CFJDDK8T6B9.x',
      `_INBOX.${caller}`,
      `_INBOX.${caller}.`,
      `_INBOX.${caller}9.x`,
      `_INBOX.${caller.slice(0, -1)}.x`,
      '_INBOX.>',
    ]) {
      assert.equal(refusedReply(subject, reply), 'foreign_reply', reply);
    }
    assert.equal(refusedReply('$SRV.PING', '$KV.parley_policy.x'), 'no_caller');
    assert.equal(refusedReply('parley.in..send', '_INBOX..x'), 'no_caller');
  });
});
