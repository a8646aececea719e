/**
 * The local state directory (`.parley/`, or `PARLEY_HOME`): keys generated on first run and reused
 * after, the nats-server configuration and data, and the creds files a person uses.
 */
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { newId, type OrgId, type UserId } from '@parley/contracts';
import {
  createDelegationKey,
  createKeyMaterial,
  DelegationKeySet,
  KeyMaterial,
  mintParticipantCreds,
  publicKeys,
} from '@parley/keys';
import * as z from 'zod';

/** Ids of what the first run creates: the local org and its admin. */
export const LocalState = z.object({
  version: z.literal(1),
  createdAt: z.string(),
  org: z.object({ id: z.string(), name: z.string() }),
  admin: z.object({ id: z.string(), name: z.string() }),
});
export type LocalState = z.infer<typeof LocalState>;

/** Paths inside the home directory. */
export function homePaths(home: string) {
  return {
    home,
    keys: join(home, 'keys.json'),
    delegationKeys: join(home, 'delegation-keys.json'),
    state: join(home, 'state.json'),
    natsDir: join(home, 'nats'),
    natsConfig: join(home, 'nats', 'nats-server.conf'),
    natsLog: join(home, 'nats', 'nats-server.log'),
    /** nats-server's pid file: how a later start finds a server a crashed run left behind. */
    natsPid: join(home, 'nats', 'nats-server.pid'),
    operatorJwt: join(home, 'nats', 'operator.jwt'),
    jetstream: join(home, 'nats', 'jetstream'),
    resolver: join(home, 'nats', 'resolver'),
    credsDir: join(home, 'creds'),
    adminCreds: join(home, 'creds', 'admin.creds'),
  };
}

async function readJson<T>(path: string, schema: z.ZodType<T>): Promise<T | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  const parsed = schema.safeParse(JSON.parse(text));
  if (!parsed.success) throw new Error(`${path} is damaged: ${parsed.error.message}`);
  return parsed.data;
}

async function writeSecret(path: string, content: string): Promise<void> {
  await writeFile(path, content, { mode: 0o600 });
  await chmod(path, 0o600);
}

/** The home directory's contents after {@link openHome}. */
export interface Home {
  paths: ReturnType<typeof homePaths>;
  keys: KeyMaterial;
  /** The keys that sign delegation tokens (the first signs), as governance's PARLEY_DELEGATION_KEYS. */
  delegationKeys: DelegationKeySet;
  state: LocalState;
  /** True when this run generated the keys. */
  firstRun: boolean;
}

/** Opens the home directory, generating keys, the local org/admin ids and admin creds on first run. */
export async function openHome(home: string): Promise<Home> {
  const paths = homePaths(home);
  await mkdir(paths.credsDir, { recursive: true, mode: 0o700 });
  await mkdir(paths.natsDir, { recursive: true });
  let keys = await readJson(paths.keys, KeyMaterial);
  const firstRun = keys === undefined;
  if (!keys) {
    keys = createKeyMaterial('parley-local');
    await writeSecret(paths.keys, `${JSON.stringify(keys, null, 2)}\n`);
  }
  // Delegation keys were added after the first homes existed: a home without them gets them now.
  let delegationKeys = await readJson(paths.delegationKeys, DelegationKeySet);
  if (!delegationKeys) {
    delegationKeys = { keys: [createDelegationKey()] };
    await writeSecret(paths.delegationKeys, `${JSON.stringify(delegationKeys, null, 2)}\n`);
  }
  let state = await readJson(paths.state, LocalState);
  if (!state) {
    state = {
      version: 1,
      createdAt: new Date().toISOString(),
      org: { id: newId('org') satisfies OrgId, name: 'local' },
      admin: { id: newId('user') satisfies UserId, name: 'admin' },
    };
    await writeFile(paths.state, `${JSON.stringify(state, null, 2)}\n`);
  }
  const adminCreds = await readFile(paths.adminCreds, 'utf8').catch(() => undefined);
  if (!adminCreds) {
    const minted = await mintParticipantCreds(
      keys.participantSigningSeed,
      publicKeys(keys).account,
      state.admin.id,
    );
    await writeSecret(paths.adminCreds, minted.creds);
  }
  return { paths, keys, delegationKeys, state, firstRun };
}
