/** `parley key` and `parley hook` against a real Parley: what they print works at the gateway. */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { runCli } from '@parley/sdk/cli';
import { connectAdmin, createAgent, startParley, type TestParley } from '@parley/test/harness';
import { Webhook } from 'standardwebhooks';
import { http } from './helpers.js';

describe('parley key and parley hook', () => {
  let parley: TestParley;
  const run = async (args: string[]) => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runCli([...args, '--server', parley.natsUrl, '--as', parley.home.paths.adminCreds], {
      out: (l) => out.push(l),
      err: (l) => err.push(l),
    });
    return { code, out: out.join('\n'), err: err.join('\n') };
  };

  before(async () => {
    parley = await startParley();
  });
  after(async () => {
    await parley?.destroy();
  });

  it('key create prints a bearer key once; list shows it; revoke stops it', async () => {
    const admin = await connectAdmin(parley);
    const { agent } = await createAgent(admin, { name: 'cli-keyed' });
    await admin.close();
    const created = await run(['key', 'create', '--for', agent.id, '--scopes', 'read', '--expires', '30d']);
    assert.equal(created.code, 0, created.err);
    const key = created.out.split('\n')[0] as string;
    assert.match(key, /^pak_/);
    assert.equal((await http(parley.httpUrl, '/v1/me', { token: key })).body.id, agent.id);
    const listed = await run(['--json', 'key', 'list', '--for', agent.id]);
    const keys = JSON.parse(listed.out).keys as { id: string; scopes: string[]; expiresAt?: string }[];
    assert.equal(keys.length, 1);
    assert.deepEqual(keys[0]?.scopes, ['read']);
    assert.ok(keys[0]?.expiresAt);
    assert.equal(listed.out.includes(key.split('.')[1] as string), false);
    assert.equal((await run(['key', 'revoke', keys[0]?.id as string])).code, 0);
    assert.equal((await http(parley.httpUrl, '/v1/me', { token: key })).body.code, 'REVOKED');
    const bad = await run(['key', 'create', '--for', 'usr_nope']);
    assert.equal(bad.code, 1);
    assert.match(bad.err, /^INVALID_ARGUMENT/);
  });

  it('hook create prints a path and secret that a signed POST uses', async () => {
    const admin = await connectAdmin(parley);
    const { agent } = await createAgent(admin, { name: 'cli-bridge', runtime: 'bridge' });
    await admin.close();
    const created = await run([
      '--json',
      'hook',
      'create',
      '--agent',
      agent.id,
      '--to',
      parley.home.state.admin.id,
      '--template',
      'ping {{n}}',
    ]);
    assert.equal(created.code, 0, created.err);
    const { path, secret, info } = JSON.parse(created.out) as {
      path: string;
      secret: string;
      info: { id: string };
    };
    const body = JSON.stringify({ n: 3 });
    const at = new Date();
    const res = await fetch(`${parley.httpUrl}${path}`, {
      method: 'POST',
      body,
      headers: {
        'content-type': 'application/json',
        'webhook-id': 'cli-1',
        'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
        'webhook-signature': new Webhook(secret).sign('cli-1', at, body),
      },
    });
    assert.equal(res.status, 202);
    const listed = await run(['hook', 'list', '--agent', agent.id]);
    assert.match(listed.out, new RegExp(info.id));
    assert.equal((await run(['hook', 'rotate-secret', info.id])).code, 0);
    assert.equal((await run(['hook', 'delete', info.id])).code, 0);
    assert.match((await run(['hook', 'list', '--agent', agent.id])).out, /no hooks/);
  });
});
