/** The bindings API (served by the MCP service): a participant's own runtime bindings only. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { bindingsApi, encodeJson, newId, subjects } from '@parley/contracts';
import type { Agent } from '@parley/sdk';
import { connectService, startParley, type TestParley } from '@parley/test/harness';

describe('bindings API', () => {
  let parley: TestParley;
  let a: Agent;
  let b: Agent;
  const key = { runtime: 'langgraph', externalId: 'thread 42 / run 7' };

  before(async () => {
    parley = await startParley();
    a = await parley.connect((await parley.participant()).creds, { presence: false });
    b = await parley.connect((await parley.participant()).creds, { presence: false });
  });
  after(async () => {
    await parley?.destroy();
  });

  it('bind creates or refreshes; advance records rooms and only moves positions forward', async () => {
    const first = await a.call(bindingsApi.bind, { ...key, session: 's-1' });
    assert.equal(first.participant, a.id);
    assert.deepEqual(first.rooms, {});
    const r1 = newId('room');
    const r2 = newId('room');
    await a.call(bindingsApi.advance, { ...key, positions: { [r1]: 5, [r2]: 0 } });
    const back = await a.call(bindingsApi.advance, { ...key, positions: { [r1]: 3 } });
    assert.equal(back.rooms[r1]?.lastReturned, 5, 'a position never moves back');
    assert.equal(back.rooms[r2]?.lastReturned, 0);
    const again = await a.call(bindingsApi.bind, { ...key, session: 's-2' });
    assert.equal(again.session, 's-2');
    assert.equal(again.rooms[r1]?.lastReturned, 5, 'a restarted session finds its rooms');
    assert.equal(again.createdAt, first.createdAt);
    const listed = await a.call(bindingsApi.list, {});
    assert.deepEqual(
      listed.bindings.map((x) => x.externalId),
      [key.externalId],
    );
  });

  it('another participant sees and changes none of them', async () => {
    assert.deepEqual((await b.call(bindingsApi.list, {})).bindings, []);
    const theirs = await b.call(bindingsApi.bind, key);
    assert.equal(theirs.participant, b.id);
    assert.deepEqual(theirs.rooms, {}, 'the same key is a different binding for another participant');
    assert.deepEqual(await b.call(bindingsApi.unbind, { runtime: 'nope', externalId: 'x' }), {
      removed: false,
    });
    assert.equal((await a.call(bindingsApi.list, {})).bindings.length, 1);
  });

  it('bad input is refused with its code and changes nothing', async () => {
    const before = await a.call(bindingsApi.list, {});
    const cases: [unknown, string][] = [
      [{ runtime: 'Bad Runtime!', externalId: 'x' }, 'INVALID_ARGUMENT'],
      [{ runtime: 'x', externalId: '' }, 'INVALID_ARGUMENT'],
      [{ runtime: 'x', externalId: 'y'.repeat(201) }, 'INVALID_ARGUMENT'],
      [{ ...key, positions: { not_a_room: 1 } }, 'INVALID_ARGUMENT'],
      [{ ...key, positions: { [newId('room')]: -1 } }, 'INVALID_ARGUMENT'],
    ];
    for (const [body, code] of cases) {
      const method = 'positions' in (body as object) ? bindingsApi.advance : bindingsApi.bind;
      await assert.rejects(
        () => a.call(method, body as never),
        (err: { code?: string }) => err.code === code,
      );
    }
    const nc = a.nc;
    const notJson = await nc.request(
      subjects.api(a.id, 'bindings', 'bind'),
      new TextEncoder().encode('{nope'),
    );
    assert.equal(notJson.headers?.get('Parley-Error'), 'INVALID_ARGUMENT');
    const huge = await nc.request(
      subjects.api(a.id, 'bindings', 'bind'),
      encodeJson({ ...key, session: 'x'.repeat(70_000) }),
    );
    assert.equal(huge.headers?.get('Parley-Error'), 'PAYLOAD_TOO_LARGE');
    assert.deepEqual(await a.call(bindingsApi.list, {}), before);
  });

  it('services have no bindings of their own', async () => {
    const svc = await connectService(parley, 'probe');
    const reply = await svc.request(subjects.api('svc_probe', 'bindings', 'bind'), encodeJson(key));
    assert.equal(reply.headers?.get('Parley-Error'), 'PERMISSION_DENIED');
    await svc.close();
  });
});
