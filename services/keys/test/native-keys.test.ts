import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decode, encodeUser, fromSeed } from '@nats-io/jwt';
import { createAccount, createUser } from '@nats-io/nkeys';
import { nativeCreateUser, nativeFromSeed } from '../src/native-keys.js';

const dec = new TextDecoder();

describe('native nkeys', () => {
  it('derive the same public and private keys and the same signatures as @nats-io/nkeys', () => {
    for (const make of [createUser, createAccount]) {
      const lib = make();
      const native = nativeFromSeed(dec.decode(lib.getSeed()));
      assert.equal(native.getPublicKey(), lib.getPublicKey());
      assert.deepEqual(native.getPrivateKey(), lib.getPrivateKey());
      const data = new TextEncoder().encode('parley');
      assert.deepEqual(native.sign(data), lib.sign(data));
      assert.ok(lib.verify(data, native.sign(data)));
      assert.ok(native.verify(data, lib.sign(data)));
    }
  });

  it('sign user JWTs with the same issuer and claims as the library', async () => {
    const account = createAccount();
    const signerSeed = dec.decode(createAccount().getSeed());
    const user = nativeCreateUser();
    const a = await encodeUser(
      'agt_x',
      user,
      account.getPublicKey(),
      {},
      { signer: nativeFromSeed(signerSeed) },
    );
    const b = await encodeUser(
      'agt_x',
      fromSeed(user.getSeed()),
      account.getPublicKey(),
      {},
      {
        signer: fromSeed(new TextEncoder().encode(signerSeed)),
      },
    );
    // jti and iat may differ between the two calls; the signed claims must decode the same.
    const [da, db] = [decode(a), decode(b)];
    assert.equal(da.sub, user.getPublicKey());
    assert.equal(da.iss, db.iss);
    assert.deepEqual(da.nats, db.nats);
  });
});
