import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, credsAuthenticator } from '@nats-io/transport-node';
import { registryApi, request, streams } from '@parley/contracts';
import {
  createDirSecretStore,
  createKubernetesSecretStore,
  DeploymentState,
  ensureKeys,
  entries,
  KubernetesApiError,
  loadConfig,
  parseInit,
  runInit,
  UsageError,
} from '@parley/init';
import { createKeyMaterial, credsIdentity, DelegationKeySet, KeyMaterial, publicKeys } from '@parley/keys';
import { ConfigError, silentLogger } from '@parley/kit';
import { findNatsServer, freePort, type NatsServerProcess, startNatsServer } from '@parley/nats-server';
import { createRegistryService } from '@parley/registry';
import { type KubeApi, startKubeApi } from './kube-api.js';

const log = silentLogger();
const dirs: string[] = [];
async function tempDir() {
  const d = await mkdtemp(join(tmpdir(), 'parley-init-'));
  dirs.push(d);
  return d;
}
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

const services = ['init', 'rooms', 'registry', 'governance'];

describe('parley-init keys (directory store)', () => {
  it('creates the documented layout once, then changes nothing on the next run', async () => {
    const dir = join(await tempDir(), 'secrets');
    const store = createDirSecretStore(dir);
    const first = await ensureKeys(store, { services, log });
    assert.equal(first.action, 'created');
    const expected = [
      entries.keys,
      entries.state,
      entries.operatorJwt,
      entries.natsAuth,
      entries.accountPublicKey,
      entries.participantSigningSeed,
      entries.operatorSeed,
      entries.serviceSigningPublicKey,
      entries.delegationKeys,
      entries.governanceEnv,
      entries.sysCreds,
      entries.adminCreds,
      ...services.map(entries.serviceCreds),
      // The least-privilege creds each service answers requests with (parley-init answers none).
      ...services.filter((s) => s !== 'init').map(entries.responderCreds),
    ].sort();
    assert.deepEqual(first.written, expected);
    assert.deepEqual((await readdir(dir)).filter((f) => !f.startsWith('.')).sort(), expected);
    for (const f of expected) assert.equal((await stat(join(dir, f))).mode & 0o777, 0o600, f);

    const keys = KeyMaterial.parse(JSON.parse(first.data[entries.keys] as string));
    const pub = publicKeys(keys);
    assert.equal(first.data[entries.accountPublicKey], pub.account);
    assert.equal(first.data[entries.participantSigningSeed], keys.participantSigningSeed);
    assert.match(
      first.data[entries.governanceEnv] as string,
      new RegExp(`PARLEY_ACCOUNT_PUBLIC_KEY=${pub.account}`),
    );
    // One delegation key set for every governance replica, the same in the env file and the Secret.
    assert.ok(
      (first.data[entries.governanceEnv] as string).includes(
        `PARLEY_DELEGATION_KEYS=${first.data[entries.delegationKeys] as string}`,
      ),
    );
    assert.equal(
      DelegationKeySet.parse(JSON.parse(first.data[entries.delegationKeys] as string)).keys.length,
      1,
    );
    assert.equal(credsIdentity(first.data[entries.serviceCreds('rooms')] as string).name, 'svc_rooms');
    const state = DeploymentState.parse(JSON.parse(first.data[entries.state] as string));
    assert.equal(credsIdentity(first.data[entries.adminCreds] as string).name, state.admin.id);
    assert.match(first.data[entries.natsAuth] as string, new RegExp(`system_account: ${pub.systemAccount}`));

    const before = await snapshot(dir);
    const second = await ensureKeys(store, { services, log });
    assert.equal(second.action, 'unchanged');
    assert.deepEqual(second.written, []);
    assert.deepEqual(await snapshot(dir), before);
  });

  it('adds the creds of a new service without replacing anything', async () => {
    const dir = join(await tempDir(), 'secrets');
    const store = createDirSecretStore(dir);
    await ensureKeys(store, { services: ['rooms'], log });
    const before = await snapshot(dir);
    const r = await ensureKeys(store, { services: ['rooms', 'gateway'], log });
    assert.equal(r.action, 'completed');
    assert.deepEqual(r.written, [entries.responderCreds('gateway'), entries.serviceCreds('gateway')]);
    const afterwards = await snapshot(dir);
    for (const [k, v] of Object.entries(before)) assert.equal(afterwards[k], v, `${k} unchanged`);
    assert.equal(credsIdentity(afterwards[entries.serviceCreds('gateway')] as string).name, 'svc_gateway');
  });

  it('completes a store that holds only keys.json (a platform team’s own keys) with those keys', async () => {
    const dir = join(await tempDir(), 'secrets');
    const keys = createKeyMaterial('acme');
    await mkdir(dir);
    await writeFile(join(dir, entries.keys), JSON.stringify(keys));
    const r = await ensureKeys(createDirSecretStore(dir), { services: ['rooms'], log });
    assert.equal(r.action, 'completed');
    assert.equal(r.data[entries.accountPublicKey], publicKeys(keys).account);
    assert.equal(r.data[entries.keys], JSON.stringify(keys));
  });

  it('refuses a store with data but no keys.json, and writes nothing', async () => {
    const dir = join(await tempDir(), 'secrets');
    await mkdir(dir);
    await writeFile(join(dir, 'other.txt'), 'not ours');
    await assert.rejects(ensureKeys(createDirSecretStore(dir), { services, log }), /has no keys\.json/);
    assert.deepEqual(await readdir(dir), ['other.txt']);
  });

  it('refuses damaged key material, and writes nothing', async () => {
    const dir = join(await tempDir(), 'secrets');
    await mkdir(dir);
    await writeFile(join(dir, entries.keys), JSON.stringify({ version: 1, operatorSeed: 'nope' }));
    await assert.rejects(ensureKeys(createDirSecretStore(dir), { services, log }), /not valid key material/);
    assert.deepEqual(await readdir(dir), [entries.keys]);
  });
});

describe('parley-init keys (Kubernetes Secret over HTTP)', () => {
  let api: KubeApi;
  before(async () => {
    api = await startKubeApi();
  });
  after(() => api.close());
  const storeFor = (name: string, token = api.token) =>
    createKubernetesSecretStore({ apiUrl: api.url, token, namespace: 'parley', name, labels: { a: 'b' } });

  it('creates the Secret, then only reads it', async () => {
    const store = storeFor('keys-a');
    const first = await ensureKeys(store, { services, log });
    assert.equal(first.action, 'created');
    const obj = api.secrets.get('parley/keys-a');
    assert.ok(obj);
    assert.equal(obj.type, 'Opaque');
    assert.deepEqual(obj.metadata.labels, { a: 'b' });
    assert.deepEqual(Object.keys(obj.data).sort(), first.written);
    assert.equal(
      Buffer.from(obj.data[entries.keys] as string, 'base64').toString(),
      first.data[entries.keys],
    );
    const version = obj.metadata.resourceVersion;

    api.requests.length = 0;
    const second = await ensureKeys(store, { services, log });
    assert.equal(second.action, 'unchanged');
    assert.deepEqual(second.data, first.data);
    assert.deepEqual(api.requests, ['GET /api/v1/namespaces/parley/secrets/keys-a']);
    assert.equal(api.secrets.get('parley/keys-a')?.metadata.resourceVersion, version);
  });

  it('two Jobs at once end with one set of keys', async () => {
    const [a, b] = await Promise.all([
      ensureKeys(storeFor('keys-race'), { services, log }),
      ensureKeys(storeFor('keys-race'), { services, log }),
    ]);
    assert.equal(a.data[entries.keys], b.data[entries.keys]);
    assert.deepEqual([a.action, b.action].sort(), ['created', 'unchanged']);
  });

  it('adds a new service’s creds to an existing Secret with an update, keeping the rest', async () => {
    const store = storeFor('keys-b');
    const first = await ensureKeys(store, { services: ['rooms'], log });
    const r = await ensureKeys(store, { services: ['rooms', 'gateway'], log });
    assert.equal(r.action, 'completed');
    const obj = api.secrets.get('parley/keys-b');
    const decoded = Object.fromEntries(
      Object.entries(obj?.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString()]),
    );
    assert.deepEqual(decoded, {
      ...first.data,
      [entries.serviceCreds('gateway')]: r.data[entries.serviceCreds('gateway')],
      [entries.responderCreds('gateway')]: r.data[entries.responderCreds('gateway')],
    });
  });

  it('says what the Role lacks when the API answers 403, and creates nothing', async () => {
    api.forbid.add('POST');
    try {
      await assert.rejects(ensureKeys(storeFor('keys-c'), { services, log }), (err: unknown) => {
        assert.ok(err instanceof KubernetesApiError);
        assert.equal(err.status, 403);
        assert.match(
          err.message,
          /creating secret parley\/keys-c: HTTP 403.*Role must allow get, create and update/,
        );
        return true;
      });
    } finally {
      api.forbid.clear();
    }
    assert.equal(api.secrets.has('parley/keys-c'), false);
  });

  it('fails on a wrong token without writing', async () => {
    await assert.rejects(ensureKeys(storeFor('keys-d', 'wrong'), { services, log }), /HTTP 401/);
    assert.equal(api.secrets.has('parley/keys-d'), false);
  });
});

describe('parley-init command line', () => {
  it('accepts keys and backbone, and refuses anything else with the usage', () => {
    assert.equal(parseInit(['keys'], {}).command, 'keys');
    assert.equal(parseInit(['backbone'], {}).command, 'backbone');
    for (const argv of [[], ['all'], ['keys', 'extra']]) {
      assert.throws(
        () => parseInit(argv, {}),
        (err: unknown) => err instanceof UsageError && /keys/.test(err.message),
      );
    }
  });

  it('lists every invalid variable at once', () => {
    assert.throws(
      () =>
        loadConfig({ PARLEY_SECRET_STORE: 'vault', PARLEY_SERVICES: 'Rooms', PARLEY_SECRET_NAME: 'UPPER' }),
      (err: unknown) =>
        err instanceof ConfigError &&
        ['PARLEY_SECRET_STORE', 'PARLEY_SERVICES', 'PARLEY_SECRET_NAME'].every((v) =>
          err.message.includes(v),
        ),
    );
  });

  it('refuses the Kubernetes store outside a pod', async () => {
    await assert.rejects(
      runInit('keys', loadConfig({ PARLEY_SECRET_STORE: 'kubernetes' }), log),
      /KUBERNETES_SERVICE_HOST/,
    );
  });
});

describe('parley-init backbone against nats-server using the generated operator config', () => {
  let nats: NatsServerProcess;
  let dir: string;
  let secrets: Record<string, string>;
  before(async () => {
    const bin = await findNatsServer();
    assert.ok(bin, 'nats-server is needed');
    dir = await tempDir();
    // The same layout as compose: the server config includes the init step's nats-auth.conf.
    const keys = await ensureKeys(createDirSecretStore(join(dir, 'secrets')), { services, log });
    secrets = keys.data;
    await mkdir(join(dir, 'resolver'), { recursive: true });
    nats = await startNatsServer({
      bin,
      configPath: join(dir, 'nats-server.conf'),
      logPath: join(dir, 'nats-server.log'),
      config: {
        serverName: 'init-test',
        host: '127.0.0.1',
        port: await freePort(),
        storeDir: join(dir, 'jetstream'),
        extra: [
          `resolver { type: full, dir: ${JSON.stringify(join(dir, 'resolver'))} }`,
          `include "secrets/${entries.natsAuth}"`,
        ].join('\n'),
      },
    });
  });
  after(() => nats?.stop());

  const env = () => ({
    NATS_URL: nats.url,
    NATS_CREDS: join(dir, 'secrets', entries.serviceCreds('init')),
    PARLEY_STATE_FILE: join(dir, 'secrets', entries.state),
    PARLEY_NATS_WAIT_MS: '20000',
  });

  it('creates the streams, seeds the admin whose creds the keys step wrote, and is idempotent', async () => {
    await runInit('backbone', loadConfig(env()), log);
    await runInit('backbone', loadConfig(env()), log);

    const svc = await connect({
      servers: nats.url,
      authenticator: credsAuthenticator(new TextEncoder().encode(secrets[entries.serviceCreds('rooms')])),
      inboxPrefix: '_INBOX.svc_rooms',
    });
    const registry = createRegistryService({ nc: svc, log });
    try {
      const jsm = await jetstreamManager(svc);
      const names = (await jsm.streams.names().next()).sort();
      for (const s of Object.values(streams)) assert.ok(names.includes(s), `${s} exists`);
      await registry.start();
      const state = DeploymentState.parse(JSON.parse(secrets[entries.state] as string));
      const admin = await connect({
        servers: nats.url,
        authenticator: credsAuthenticator(new TextEncoder().encode(secrets[entries.adminCreds])),
        inboxPrefix: `_INBOX.${state.admin.id}`,
      });
      const me = await request(admin, state.admin.id, registryApi.whoami, {});
      assert.equal(me.kind, 'human');
      assert.equal(me.superadmin, true);
      assert.equal(me.org, state.org.id);
      await admin.close();
    } finally {
      await registry.stop();
      await svc.close();
    }
  });

  it('gives up with a clear error when NATS is not there', async () => {
    const config = loadConfig({
      ...env(),
      NATS_URL: `nats://127.0.0.1:${await freePort()}`,
      PARLEY_NATS_WAIT_MS: '0',
    });
    await assert.rejects(runInit('backbone', config, log), /not reachable/);
  });
});

async function snapshot(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const f of await readdir(dir)) if (!f.startsWith('.')) out[f] = await readFile(join(dir, f), 'utf8');
  return out;
}
