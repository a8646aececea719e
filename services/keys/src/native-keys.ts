/**
 * nkeys key pairs that sign with Node's native Ed25519 instead of the pure-JS tweetnacl inside
 * `@nats-io/nkeys`, which re-derives the key from the seed on every call (about 8 ms each on the
 * reference machine, and minting a user JWT calls it ~10 times: 145 ms per creds, all of it on
 * governance's event loop). Same keys, same encodings, same signatures (Ed25519 is deterministic);
 * a test checks them against the library's own.
 */
import { createPrivateKey, createPublicKey, type KeyObject, sign, verify } from 'node:crypto';
import { createUser, fromSeed, type KeyPair, Prefix } from '@nats-io/nkeys';
// The codec is not re-exported; the package has no exports map and its version is pinned.
import { Codec } from '@nats-io/nkeys/lib/codec.js';

const enc = new TextEncoder();
const dec = new TextDecoder();
const PKCS8_ED25519 = Buffer.from('302e020100300506032b657004220420', 'hex');

class NativeKeyPair implements KeyPair {
  readonly #seed: Uint8Array;
  readonly #private: KeyObject;
  readonly #public: KeyObject;
  readonly #publicKey: string;
  readonly #privateKey: Uint8Array;

  constructor(seed: Uint8Array) {
    const { prefix, buf } = Codec.decodeSeed(seed);
    this.#seed = seed;
    this.#private = createPrivateKey({
      key: Buffer.concat([PKCS8_ED25519, buf]),
      format: 'der',
      type: 'pkcs8',
    });
    this.#public = createPublicKey(this.#private);
    const raw = Buffer.from(this.#public.export({ format: 'jwk' }).x as string, 'base64url');
    this.#publicKey = dec.decode(Codec.encode(prefix, raw));
    this.#privateKey = Codec.encode(Prefix.Private, Buffer.concat([buf, raw]));
  }

  getPublicKey(): string {
    return this.#publicKey;
  }
  getPrivateKey(): Uint8Array {
    return this.#privateKey;
  }
  getSeed(): Uint8Array {
    return this.#seed;
  }
  sign(input: Uint8Array): Uint8Array {
    return new Uint8Array(sign(null, input, this.#private));
  }
  verify(input: Uint8Array, sig: Uint8Array): boolean {
    return verify(null, input, this.#public, sig);
  }
  clear(): void {
    this.#seed.fill(0);
  }
  seal(): Uint8Array {
    throw new Error('not a curve key');
  }
  open(): Uint8Array | null {
    throw new Error('not a curve key');
  }
}

const cache = new Map<string, KeyPair>();

/** The key pair of an nkeys seed (`S…`), signing natively; signing keys are cached. */
export function nativeFromSeed(seed: string): KeyPair {
  let kp = cache.get(seed);
  if (!kp) {
    // Validates the seed the way the library does.
    fromSeed(enc.encode(seed));
    kp = new NativeKeyPair(enc.encode(seed));
    if (cache.size > 64) cache.clear();
    cache.set(seed, kp);
  }
  return kp;
}

/** A new user key pair (random seed from the library), signing natively. Not cached. */
export function nativeCreateUser(): KeyPair {
  return new NativeKeyPair(createUser().getSeed());
}
