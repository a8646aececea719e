import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, credsAuthenticator } from '@nats-io/transport-node';
import { newId } from '@parley/contracts';
import {
  createKeyMaterial,
  mintParticipantCreds,
  mintSystemCreds,
  publicKeys,
  signServerJwts,
} from '@parley/governance';
import { freePort, startNatsServer } from '@parley/standalone';

const dir = await mkdtemp(join(tmpdir(), 'exp-'));
const keys = createKeyMaterial('exp');
const pub = publicKeys(keys);
const port = await freePort();
const jwts0 = await signServerJwts(keys);
await writeFile(join(dir, 'op.jwt'), jwts0.operator);
const srv = await startNatsServer({
  bin: '/usr/sbin/nats-server',
  configPath: join(dir, 'c.conf'),
  logPath: join(dir, 'log'),
  config: {
    serverName: 'x',
    host: '127.0.0.1',
    port,
    storeDir: join(dir, 'js'),
    operator: {
      operatorJwtPath: join(dir, 'op.jwt'),
      systemAccount: pub.systemAccount,
      resolverDir: join(dir, 'res'),
      preload: { [pub.systemAccount]: jwts0.systemAccount, [pub.account]: jwts0.account },
    },
  },
});
const url = `nats://127.0.0.1:${port}`;
const sys = await connect({
  servers: url,
  authenticator: credsAuthenticator(new TextEncoder().encode((await mintSystemCreds(keys)).creds)),
});
await new Promise((r) => setTimeout(r, 1100));
const ids = [newId('agent'), newId('agent')];
const cs = await Promise.all(
  ids.map((id) => mintParticipantCreds(keys.participantSigningSeed, pub.account, id)),
);
const now = Math.floor(Date.now() / 1000);
const j1 = await signServerJwts({ ...keys, revocations: { [cs[0]!.userPublicKey]: now } });
const j2 = await signServerJwts({
  ...keys,
  revocations: { [cs[0]!.userPublicKey]: now, [cs[1]!.userPublicKey]: now },
});
for (const j of [j1, j2])
  console.log((await sys.request('$SYS.REQ.CLAIMS.UPDATE', j.account)).string().slice(0, 120));
for (const [i, id] of ids.entries()) {
  try {
    const c = await connect({
      servers: url,
      authenticator: credsAuthenticator(new TextEncoder().encode(cs[i]!.creds)),
      inboxPrefix: `_INBOX.${id}`,
      reconnect: false,
    });
    console.log(i, 'CONNECTED');
    await c.close();
  } catch (e) {
    console.log(i, 'refused', (e as Error).message);
  }
}
// older jwt push
const r = await sys.request('$SYS.REQ.CLAIMS.UPDATE', jwts0.account);
console.log('older push:', r.string().slice(0, 150));
try {
  const c = await connect({
    servers: url,
    authenticator: credsAuthenticator(new TextEncoder().encode(cs[0]!.creds)),
    inboxPrefix: `_INBOX.${ids[0]}`,
    reconnect: false,
  });
  console.log('after older push: CONNECTED');
  await c.close();
} catch (e) {
  console.log('after older push refused', (e as Error).message);
}
await sys.close();
await srv.stop();
