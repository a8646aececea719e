import { mkdtemp, readdir, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decode } from '@nats-io/jwt';
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
const start = (preloadAccount: string) =>
  startNatsServer({
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
        preload: { [pub.systemAccount]: jwts0.systemAccount, [pub.account]: preloadAccount },
      },
    },
  });
let srv = await start(jwts0.account);
const url = `nats://127.0.0.1:${port}`;
const id = newId('agent');
const a = await mintParticipantCreds(keys.participantSigningSeed, pub.account, id);
const conn = (c: string) =>
  connect({
    servers: url,
    authenticator: credsAuthenticator(new TextEncoder().encode(c)),
    inboxPrefix: `_INBOX.${id}`,
    maxReconnectAttempts: 0,
    reconnect: false,
  });
console.log('server up');
const live = await conn(a.creds);
console.log('live connected');
const closed = live.closed().then((e) => `closed: ${e}`);
const sys = await connect({
  servers: url,
  authenticator: credsAuthenticator(new TextEncoder().encode((await mintSystemCreds(keys)).creds)),
});
await new Promise((r) => setTimeout(r, 1100));
const revoked = { ...keys, revocations: { [a.userPublicKey]: Math.floor(Date.now() / 1000) } };
const jwts1 = await signServerJwts(revoked);
const r = await sys.request('$SYS.REQ.CLAIMS.UPDATE', jwts1.account, { timeout: 3000 });
console.log('push reply', r.string());
console.log(
  await Promise.race([closed, new Promise((res) => setTimeout(() => res('still open after 3s'), 3000))]),
);
try {
  const c = await conn(a.creds);
  console.log('reconnect after revoke: CONNECTED (bad)');
  await c.close();
} catch (e) {
  console.log('reconnect after revoke refused:', (e as Error).message);
}
await sys.close();
console.log('resolver dir', await readdir(join(dir, 'res')));
await srv.stop();
// restart with a freshly signed JWT without revocations (newer iat)
await new Promise((r) => setTimeout(r, 1100));
const jwts2 = await signServerJwts(keys);
srv = await start(jwts2.account);
try {
  const c = await conn(a.creds);
  console.log('after restart w/ newer preload (no revs): CONNECTED');
  await c.close();
} catch (e) {
  console.log('after restart w/ newer preload refused:', (e as Error).message);
}
const f = await readFile(join(dir, 'res', `${pub.account}.jwt`), 'utf8');
console.log('dir jwt revocations:', JSON.stringify((decode(f) as any).nats.revocations));
await srv.stop();
// restart with the OLD preload jwts0 (older iat) after pushing revocation again
srv = await start(jwts1.account); // put revs back
await srv.stop();
srv = await start(jwts0.account);
try {
  const c = await conn(a.creds);
  console.log('after restart w/ older preload: CONNECTED');
  await c.close();
} catch (e) {
  console.log('after restart w/ older preload refused:', (e as Error).message);
}
const f2 = await readFile(join(dir, 'res', `${pub.account}.jwt`), 'utf8');
console.log(
  'dir jwt revocations:',
  JSON.stringify((decode(f2) as any).nats.revocations),
  'iat',
  (decode(f2) as any).iat,
  'jwts0 iat',
  (decode(jwts0.account) as any).iat,
);
await srv.stop();
