/**
 * Operator-mode NATS identity for a Parley deployment: the operator, the system account, the PARLEY
 * account with its two signing keys, and the creds of services and participants.
 *
 * - The **service** signing key is unscoped: it signs the users of Parley's own services.
 * - The **participant** signing key is scoped (`user_scope`) with the permission template of DESIGN's
 *   "Names on NATS": a user it signs can only publish under `parley.in.<its name>.`, pull and ack its
 *   own inbox consumer, and receive replies on `_INBOX.<its name>.`. Whoever holds only this key
 *   cannot mint anything broader: the server applies the template, not the user JWT.
 */

import { isDeepStrictEqual } from 'node:util';
import {
  createAccount,
  createOperator,
  decode,
  encodeAccount,
  encodeOperator,
  encodeUser,
  fmtCreds,
  fromPublic,
  newScopedSigner,
} from '@nats-io/jwt';
import {
  isServiceId,
  ParleyError,
  participantPermissionTemplate,
  responderPermissions,
  serviceId,
} from '@parley/contracts';
import * as z from 'zod';
import { nativeCreateUser, nativeFromSeed } from './native-keys.js';

const dec = new TextDecoder();

/** The role name of the participant signing key in the account JWT. */
export const PARTICIPANT_ROLE = 'participant';

/** The seeds that make up a deployment's NATS identity (keep them secret). */
export const KeyMaterial = z.object({
  version: z.literal(1),
  operatorName: z.string(),
  operatorSeed: z.string().startsWith('SO'),
  systemAccountSeed: z.string().startsWith('SA'),
  accountSeed: z.string().startsWith('SA'),
  serviceSigningSeed: z.string().startsWith('SA'),
  participantSigningSeed: z.string().startsWith('SA'),
  /** Revoked user public keys → unix seconds; everything issued to them before is refused. */
  revocations: z.record(z.string(), z.number()).default({}),
});
export type KeyMaterial = z.infer<typeof KeyMaterial>;

/** Generates a new identity: operator, system account, PARLEY account and its signing keys. */
export function createKeyMaterial(operatorName = 'parley'): KeyMaterial {
  const seed = (kp: { getSeed(): Uint8Array }) => dec.decode(kp.getSeed());
  return {
    version: 1,
    operatorName,
    operatorSeed: seed(createOperator()),
    systemAccountSeed: seed(createAccount()),
    accountSeed: seed(createAccount()),
    serviceSigningSeed: seed(createAccount()),
    participantSigningSeed: seed(createAccount()),
    revocations: {},
  };
}

// Native Ed25519 signing: see native-keys.ts for why.
const kp = (seed: string) => nativeFromSeed(seed);
const pub = (seed: string) => kp(seed).getPublicKey();

/** Public keys of the material. */
export function publicKeys(m: KeyMaterial) {
  return {
    operator: pub(m.operatorSeed),
    systemAccount: pub(m.systemAccountSeed),
    account: pub(m.accountSeed),
    serviceSigning: pub(m.serviceSigningSeed),
    participantSigning: pub(m.participantSigningSeed),
  };
}

/** The JWTs a nats-server in operator mode needs. */
export interface ServerJwts {
  operator: string;
  systemAccount: string;
  account: string;
}

/** The NATS limits of an account without limits (connections, subscriptions, data, imports…). */
const NO_ACCOUNT_LIMITS = {
  subs: -1,
  data: -1,
  payload: -1,
  imports: -1,
  exports: -1,
  wildcards: true,
  conn: -1,
  leaf: -1,
};

/** Signs the operator and account JWTs (the account JWT carries the revocations). */
export async function signServerJwts(m: KeyMaterial): Promise<ServerJwts> {
  const op = kp(m.operatorSeed);
  const keys = publicKeys(m);
  const operator = await encodeOperator(m.operatorName, op, { system_account: keys.systemAccount });
  // Without explicit limits an account JWT allows no connections: the `sys` user that pushes
  // revocations needs to connect.
  const systemAccount = await encodeAccount(
    'SYS',
    kp(m.systemAccountSeed),
    {
      limits: NO_ACCOUNT_LIMITS,
    },
    { signer: op },
  );
  const account = await signAccountJwt(accountSigner(m), m.revocations);
  return { operator, systemAccount, account };
}

/**
 * What re-signing the PARLEY account JWT takes: the operator key (or an operator signing key) and
 * the public parts of the account. Governance holds it to push revocations at runtime.
 */
export interface AccountSigner {
  /** Seed of the operator (or an operator signing key). */
  operatorSeed: string;
  accountPublicKey: string;
  serviceSigningPublicKey: string;
  participantSigningPublicKey: string;
}

/** The {@link AccountSigner} of a deployment's key material. */
export function accountSigner(m: KeyMaterial): AccountSigner {
  const keys = publicKeys(m);
  return {
    operatorSeed: m.operatorSeed,
    accountPublicKey: keys.account,
    serviceSigningPublicKey: keys.serviceSigning,
    participantSigningPublicKey: keys.participantSigning,
  };
}

/**
 * Signs the PARLEY account JWT: JetStream enabled without limits, the unscoped service signing key,
 * the scoped participant signing key with DESIGN's permission template, and `revocations` (user
 * public key → unix seconds: user JWTs of that key issued at or before it are refused).
 */
export async function signAccountJwt(s: AccountSigner, revocations: Record<string, number>): Promise<string> {
  return encodeAccount(
    'PARLEY',
    fromPublic(s.accountPublicKey),
    {
      limits: {
        ...NO_ACCOUNT_LIMITS,
        mem_storage: -1,
        disk_storage: -1,
        streams: -1,
        consumer: -1,
      },
      signing_keys: [
        s.serviceSigningPublicKey,
        newScopedSigner(
          fromPublic(s.participantSigningPublicKey),
          PARTICIPANT_ROLE,
          participantPermissionTemplate(),
        ),
      ],
      revocations,
    },
    { signer: kp(s.operatorSeed) },
  );
}

/** The revocations inside an account JWT (empty when there are none or it cannot be read). */
export function revocationsOf(accountJwt: string): Record<string, number> {
  try {
    const claims = decode<{ revocations?: Record<string, number> }>(accountJwt.trim());
    return { ...(claims.nats.revocations ?? {}) };
  } catch {
    return {};
  }
}

/**
 * Whether two account JWTs say the same (issuer, account, name and every NATS claim: limits, signing
 * keys with their templates, revocations), whenever and under whichever id each was signed. False
 * when either cannot be read.
 */
export function sameAccountClaims(a: string, b: string): boolean {
  try {
    const what = (jwt: string) => {
      const c = decode(jwt.trim());
      return { iss: c.iss, sub: c.sub, name: c.name, nats: c.nats };
    };
    return isDeepStrictEqual(what(a), what(b));
  } catch {
    return false;
  }
}

/** Newly minted credentials. */
export interface MintedCreds {
  /** The creds file contents (user JWT + seed). */
  creds: string;
  /** The user's public key (what a revocation names). */
  userPublicKey: string;
}

/**
 * Mints the creds of a Parley service (`svc_<name>`), signed by the unscoped service key: full access
 * within the PARLEY account, less what `deny` names (subjects it may not publish to).
 */
export async function mintServiceCreds(
  m: KeyMaterial,
  name: string,
  deny: { pub?: string[] } = {},
): Promise<MintedCreds> {
  const id = isServiceId(name) ? name : serviceId(name);
  const user = nativeCreateUser();
  const limits = deny.pub?.length ? { pub: { deny: deny.pub } } : {};
  const jwt = await encodeUser(id, user, pub(m.accountSeed), limits, { signer: kp(m.serviceSigningSeed) });
  return { creds: dec.decode(fmtCreds(jwt, user)), userPublicKey: user.getPublicKey() };
}

/**
 * Mints the creds of a service's **responder** connection (`svc_<name>` too): it receives requests
 * and may publish nothing but replies under `_INBOX.>` (`responderPermissions`), so a reply subject
 * a caller names can never make the service write to a stream, a bucket or another participant's
 * subject. The service writes over its other connection ({@link mintServiceCreds}).
 */
export async function mintResponderCreds(m: KeyMaterial, name: string): Promise<MintedCreds> {
  const id = isServiceId(name) ? name : serviceId(name);
  const user = nativeCreateUser();
  const jwt = await encodeUser(id, user, pub(m.accountSeed), responderPermissions(id), {
    signer: kp(m.serviceSigningSeed),
  });
  return { creds: dec.decode(fmtCreds(jwt, user)), userPublicKey: user.getPublicKey() };
}

/**
 * Mints a participant's creds with the scoped key: the user's name is the participant id, so the
 * server fills the permission template with it. Only the governance service holds this key.
 */
export async function mintParticipantCreds(
  participantSigningSeed: string,
  accountPublicKey: string,
  participantId: string,
  options: { expiresAt?: Date } = {},
): Promise<MintedCreds> {
  if (!/^(usr|agt)_[0-9A-Z]{26}$/.test(participantId)) {
    throw new ParleyError('INVALID_ARGUMENT', `not a participant id: ${participantId}`);
  }
  const user = nativeCreateUser();
  const jwt = await encodeUser(
    participantId,
    user,
    accountPublicKey,
    {},
    {
      signer: kp(participantSigningSeed),
      scopedUser: true,
      ...(options.expiresAt ? { exp: Math.floor(options.expiresAt.getTime() / 1000) } : {}),
    },
  );
  return { creds: dec.decode(fmtCreds(jwt, user)), userPublicKey: user.getPublicKey() };
}

/** Mints the system account user (for pushing account JWT updates to the server). */
export async function mintSystemCreds(m: KeyMaterial): Promise<MintedCreds> {
  const user = nativeCreateUser();
  const jwt = await encodeUser('sys', user, kp(m.systemAccountSeed));
  return { creds: dec.decode(fmtCreds(jwt, user)), userPublicKey: user.getPublicKey() };
}

/** The name (participant or service id) and public key inside a creds file. */
export function credsIdentity(creds: string): {
  name: string;
  userPublicKey: string;
  issuerAccount?: string;
} {
  const m = creds.match(/-----BEGIN NATS USER JWT-----\s*([^\s-][^\n]*)\s*------END NATS USER JWT------/);
  if (!m?.[1]) throw new ParleyError('INVALID_ARGUMENT', 'not a NATS creds file');
  const claims = decode<{ issuer_account?: string }>(m[1].trim());
  return {
    name: claims.name,
    userPublicKey: claims.sub,
    ...(claims.nats.issuer_account ? { issuerAccount: claims.nats.issuer_account } : {}),
  };
}
