import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createDelegationKey, loadSigningKeys, parseDelegationKeys, publicJwk } from '@parley/keys';
import { jwtVerify, SignJWT } from 'jose';
import { loadConfig } from '../src/config.js';

const env = {
  PARLEY_ACCOUNT_PUBLIC_KEY: `A${'A'.repeat(55)}`,
  PARLEY_PARTICIPANT_SIGNING_SEED: `SA${'A'.repeat(56)}`,
};

describe('delegation signing keys', () => {
  it('sign with the first key and publish every public key, which verifies what it signed', async () => {
    const [a, b] = [createDelegationKey(), createDelegationKey()];
    assert.notEqual(a.kid, b.kid);
    const keys = await loadSigningKeys({ keys: [a, b] });
    assert.equal(keys.kid, a.kid);
    assert.deepEqual(keys.published, [publicJwk(a), publicJwk(b)]);
    assert.ok(
      keys.published.every((k) => !('d' in k)),
      'no private part is published',
    );
    const jwt = await new SignJWT({ x: 1 })
      .setProtectedHeader({ alg: 'EdDSA', kid: keys.kid })
      .sign(keys.key);
    const { payload } = await jwtVerify(jwt, { kty: 'OKP', crv: 'Ed25519', x: a.x } as never);
    assert.equal(payload.x, 1);
  });

  it('come from PARLEY_DELEGATION_KEYS, and a bad value stops the service at start', () => {
    const good = JSON.stringify({ keys: [createDelegationKey()] });
    assert.equal(loadConfig({ ...env, PARLEY_DELEGATION_KEYS: good }).PARLEY_DELEGATION_KEYS, good);
    for (const bad of ['not json', '{"keys":[]}', '{"keys":[{"kty":"RSA"}]}']) {
      assert.throws(() => loadConfig({ ...env, PARLEY_DELEGATION_KEYS: bad }), /PARLEY_DELEGATION_KEYS/);
      assert.throws(() => parseDelegationKeys(bad), /PARLEY_DELEGATION_KEYS/);
    }
    assert.equal(loadConfig(env).PARLEY_DELEGATION_MAX_DEPTH, 4);
  });
});
