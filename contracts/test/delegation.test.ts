import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  actClaimOf,
  actorsOf,
  intersectScopes,
  isParleyError,
  newId,
  normalizeScopes,
  readDelegationToken,
  Scope,
  scopeCovers,
  uncoveredScopes,
} from '@parley/contracts';

const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');

describe('scopes', () => {
  it('a pattern covers only whole trailing segments', () => {
    assert.ok(scopeCovers('hr:payroll:read', 'hr:payroll:read'));
    assert.ok(scopeCovers('hr:*', 'hr:payroll:read'));
    assert.ok(scopeCovers('tool:hr.*', 'tool:hr.payroll.read'));
    assert.ok(scopeCovers('*', 'anything:at:all'));
    assert.ok(!scopeCovers('hr:*', 'hr'));
    assert.ok(!scopeCovers('hr:*', 'hrx:payroll'));
    assert.ok(!scopeCovers('hr:payroll:read', 'hr:payroll:write'));
    assert.ok(!scopeCovers('hr:payroll:read', 'hr:*'), 'a scope never covers a broader pattern');
  });

  it('intersect to the narrower scope of each pair, and report what is not covered', () => {
    assert.deepEqual(intersectScopes(['hr:*'], ['hr:payroll:read', 'it:tickets']), ['hr:payroll:read']);
    assert.deepEqual(intersectScopes(['hr:payroll:*', 'it:*'], ['hr:*']), ['hr:payroll:*']);
    assert.deepEqual(intersectScopes(['a:b'], ['c:d']), []);
    assert.deepEqual(normalizeScopes(['hr:*', 'hr:payroll:read', 'hr:*', 'b:c']), ['b:c', 'hr:*']);
    assert.deepEqual(uncoveredScopes(['hr:payroll:read', 'it:x'], ['it:*']), ['hr:payroll:read']);
  });

  it('the wire schema accepts scopes and trailing wildcards only', () => {
    for (const ok of ['hr:payroll:read', 'tool:hr.payroll.read', 'hr:*', 'tool:hr.*', '*']) {
      assert.ok(Scope.safeParse(ok).success, ok);
    }
    for (const bad of ['', 'HR:read', 'hr:*:read', 'hr*', 'a b', '**', ':x']) {
      assert.ok(!Scope.safeParse(bad).success, bad);
    }
  });
});

describe('delegation claims', () => {
  it('nest actors as RFC 8693 does: the current actor outermost, the first deepest', () => {
    const [a, b, c] = [newId('agent'), newId('agent'), newId('agent')];
    const act = actClaimOf([a, b, c]);
    assert.equal(act.sub, c);
    assert.equal(act.act?.act?.sub, a);
    assert.deepEqual(actorsOf(act), [a, b, c]);
  });

  it('reads an unverified token into principal, chain and scope', () => {
    const user = newId('user');
    const [a, b] = [newId('agent'), newId('agent')];
    const jti = newId('token');
    const claims = {
      iss: 'parley',
      aud: 'parley',
      sub: user,
      org: newId('org'),
      act: actClaimOf([a, b]),
      scope: 'hr:records:read tickets:write',
      jti,
      iat: 1,
      exp: 2,
      ancestors: [newId('token')],
    };
    const view = readDelegationToken(`${b64({ alg: 'EdDSA' })}.${b64(claims)}.sig`);
    assert.equal(view.principal, user);
    assert.deepEqual(view.chain, [a, b]);
    assert.equal(view.actor, b);
    assert.deepEqual(view.scope, ['hr:records:read', 'tickets:write']);
    assert.equal(view.lineage.at(-1), jti);
    assert.equal(view.expiresAt.getTime(), 2000);
  });

  it('refuses what is not a Parley token with INVALID_ARGUMENT', () => {
    for (const bad of ['', 'a.b', 'x.y.z', `${b64({})}.${b64({ sub: 'usr_x' })}.s`]) {
      assert.throws(
        () => readDelegationToken(bad),
        (e) => isParleyError(e, 'INVALID_ARGUMENT'),
      );
    }
  });
});
