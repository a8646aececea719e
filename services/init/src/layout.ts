/**
 * The layout of a deployment's key material: one flat map of file name → contents, stored as the
 * keys of one Kubernetes Secret or as files in one directory. `keys.json` is the source of truth;
 * every other entry is derived from it once and then kept (creds and ids are random, so re-deriving
 * them would change them under running services).
 */
import { newId } from '@parley/contracts';
import {
  createDelegationKey,
  createKeyMaterial,
  KeyMaterial,
  mintParticipantCreds,
  mintResponderCreds,
  mintServiceCreds,
  mintSystemCreds,
  publicKeys,
  type ServerJwts,
  signServerJwts,
} from '@parley/keys';
import * as z from 'zod';

/** The ids a deployment creates on first run: its first organisation and that org's admin. */
export const DeploymentState = z.object({
  version: z.literal(1),
  createdAt: z.string(),
  org: z.object({ id: z.string(), name: z.string() }),
  admin: z.object({ id: z.string(), name: z.string() }),
});
export type DeploymentState = z.infer<typeof DeploymentState>;

/** Names of the entries (Secret keys / file names). */
export const entries = {
  /** Every seed (operator, accounts, signing keys) and the revocations: the source of truth. */
  keys: 'keys.json',
  /** The first org and admin ids. */
  state: 'state.json',
  /** The operator JWT (also inlined in nats-auth.conf). */
  operatorJwt: 'operator.jwt',
  /** nats-server operator-mode include: operator, system_account, resolver_preload. */
  natsAuth: 'nats-auth.conf',
  /** Public key of the PARLEY account (governance: PARLEY_ACCOUNT_PUBLIC_KEY). */
  accountPublicKey: 'account.pub',
  /** Seed of the scoped participant signing key (governance: PARLEY_PARTICIPANT_SIGNING_SEED). */
  participantSigningSeed: 'participant-signing.seed',
  /** The operator's seed (governance: PARLEY_OPERATOR_SEED, to re-sign the account JWT on revocation). */
  operatorSeed: 'operator.seed',
  /** Public key of the service signing key (governance: PARLEY_SERVICE_SIGNING_PUBLIC_KEY). */
  serviceSigningPublicKey: 'service-signing.pub',
  /**
   * The Ed25519 keys that sign delegation tokens (governance: PARLEY_DELEGATION_KEYS). One for the
   * whole deployment, so every governance replica signs tokens every other one verifies.
   */
  delegationKeys: 'delegation-keys.json',
  /** Governance's variables as an env file (compose, where a Secret's keys cannot become variables). */
  governanceEnv: 'governance.env',
  /** The system account user (pushes account JWT updates, e.g. revocations). */
  sysCreds: 'sys.creds',
  /** The first org's admin (a human participant). */
  adminCreds: 'admin.creds',
  /** Creds of service `name` (`svc_<name>`). */
  serviceCreds: (name: string) => `svc-${name}.creds`,
  /**
   * Creds of the connection service `name` answers requests on (`svc_<name>` too, but it may publish
   * only replies under `_INBOX.>`): NATS_RESPONDER_CREDS.
   */
  responderCreds: (name: string) => `svc-${name}-responder.creds`,
} as const;

/** Options of {@link deriveMissing}. */
export interface LayoutOptions {
  /** Services to mint creds for, e.g. `['rooms', 'registry']`. */
  services: string[];
  /** Operator name on first run. @default parley */
  operatorName?: string;
  /** First org's name on first run. @default default */
  orgName?: string;
  /** Where the entries are mounted as files, for paths in governance.env. @default /parley/secrets */
  mountDir?: string;
}

/**
 * Renders the nats-server operator-mode include. The operator JWT is inlined (nats-server accepts the
 * JWT itself in place of a path), so the include is one self-contained file whatever it is mounted as.
 * The resolver block (type full, dir) is the server configuration's business: in Kubernetes the NATS
 * chart's `config.resolver`, in compose `deploy/nats/nats.conf`.
 */
export function renderNatsAuth(jwts: ServerJwts, pub: ReturnType<typeof publicKeys>): string {
  return [
    '# Parley operator mode, written by parley-init from keys.json. Included by the nats-server config.',
    `operator: ${jwts.operator}`,
    `system_account: ${pub.systemAccount}`,
    // nats-server's default is 2 s: many agents connecting at once to a loaded server missed it
    // (pnpm bench:scale, docs/operations.md "Capacity"). The same as the standalone's.
    'authorization: { timeout: 10 }',
    'resolver_preload: {',
    `  ${pub.systemAccount}: ${jwts.systemAccount}`,
    `  ${pub.account}: ${jwts.account}`,
    '}',
    '',
  ].join('\n');
}

/**
 * Returns the entries `existing` lacks (generating keys.json first when it is absent too). An entry
 * present in `existing` is never replaced; an empty result means nothing to write.
 */
export async function deriveMissing(
  existing: Readonly<Record<string, string>>,
  options: LayoutOptions,
): Promise<Record<string, string>> {
  const added: Record<string, string> = {};
  let keys: KeyMaterial;
  const keysText = existing[entries.keys];
  if (keysText === undefined) {
    keys = createKeyMaterial(options.operatorName ?? 'parley');
    added[entries.keys] = `${JSON.stringify(keys, null, 2)}\n`;
  } else {
    const parsed = KeyMaterial.safeParse(JSON.parse(keysText));
    if (!parsed.success)
      throw new Error(`${entries.keys} is not valid key material: ${parsed.error.message}`);
    keys = parsed.data;
  }
  const pub = publicKeys(keys);
  const has = (name: string) => existing[name] !== undefined;
  let state: DeploymentState;
  if (has(entries.state)) {
    state = DeploymentState.parse(JSON.parse(existing[entries.state] as string));
  } else {
    state = {
      version: 1,
      createdAt: new Date().toISOString(),
      org: { id: newId('org'), name: options.orgName ?? 'default' },
      admin: { id: newId('user'), name: 'admin' },
    };
    added[entries.state] = `${JSON.stringify(state, null, 2)}\n`;
  }
  if (!has(entries.operatorJwt) || !has(entries.natsAuth)) {
    const jwts = await signServerJwts(keys);
    if (!has(entries.operatorJwt)) added[entries.operatorJwt] = jwts.operator;
    if (!has(entries.natsAuth)) added[entries.natsAuth] = renderNatsAuth(jwts, pub);
  }
  if (!has(entries.accountPublicKey)) added[entries.accountPublicKey] = pub.account;
  if (!has(entries.participantSigningSeed))
    added[entries.participantSigningSeed] = keys.participantSigningSeed;
  if (!has(entries.operatorSeed)) added[entries.operatorSeed] = keys.operatorSeed;
  if (!has(entries.serviceSigningPublicKey)) added[entries.serviceSigningPublicKey] = pub.serviceSigning;
  const delegationKeys =
    existing[entries.delegationKeys] ?? JSON.stringify({ keys: [createDelegationKey()] });
  if (!has(entries.delegationKeys)) added[entries.delegationKeys] = delegationKeys;
  if (!has(entries.governanceEnv)) {
    added[entries.governanceEnv] = [
      `PARLEY_ACCOUNT_PUBLIC_KEY=${pub.account}`,
      `PARLEY_PARTICIPANT_SIGNING_SEED=${keys.participantSigningSeed}`,
      // Revocations reach NATS: governance re-signs the account JWT and pushes it as the system user.
      `PARLEY_OPERATOR_SEED=${keys.operatorSeed}`,
      `PARLEY_SERVICE_SIGNING_PUBLIC_KEY=${pub.serviceSigning}`,
      `PARLEY_SYSTEM_CREDS=${options.mountDir ?? '/parley/secrets'}/${entries.sysCreds}`,
      `PARLEY_DELEGATION_KEYS=${delegationKeys}`,
      '',
    ].join('\n');
  }
  if (!has(entries.sysCreds)) added[entries.sysCreds] = (await mintSystemCreds(keys)).creds;
  if (!has(entries.adminCreds)) {
    added[entries.adminCreds] = (
      await mintParticipantCreds(keys.participantSigningSeed, pub.account, state.admin.id)
    ).creds;
  }
  for (const name of options.services) {
    const entry = entries.serviceCreds(name);
    if (!has(entry)) added[entry] = (await mintServiceCreds(keys, name)).creds;
    // parley-init answers no requests: it needs no responder.
    const responder = entries.responderCreds(name);
    if (name !== 'init' && !has(responder)) added[responder] = (await mintResponderCreds(keys, name)).creds;
  }
  return added;
}
