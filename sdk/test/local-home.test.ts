import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { localBackbone } from '@parley/sdk';

describe('finding the local backbone', () => {
  let dir: string;
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('uses PARLEY_HOME, else the nearest .parley with admin creds at or above the working directory; NATS_URL, else run.json', async () => {
    dir = await mkdtemp(join(tmpdir(), 'parley-local-'));
    const checkout = join(dir, 'checkout');
    const deep = join(checkout, 'sdk', 'src');
    await mkdir(join(checkout, '.parley', 'creds'), { recursive: true });
    await mkdir(deep, { recursive: true });
    await writeFile(join(checkout, '.parley', 'creds', 'admin.creds'), 'creds');
    // A .parley without admin creds on the way up (parley connect's ~/.parley/agents) is not a home.
    await mkdir(join(checkout, 'sdk', '.parley', 'agents'), { recursive: true });

    const found = localBackbone({}, deep);
    assert.equal(found.home, join(checkout, '.parley'));
    assert.equal(found.adminCreds, join(checkout, '.parley', 'creds', 'admin.creds'));
    assert.equal(found.natsUrl, 'nats://127.0.0.1:4222');
    assert.equal(found.natsUrlFrom, 'default');

    // Where npm start runs, from its run.json; NATS_URL wins over it.
    const run = {
      pid: 1,
      natsUrl: 'nats://127.0.0.1:4333',
      httpUrl: 'http://127.0.0.1:7421',
      home: 'x',
      startedAt: 'now',
    };
    await writeFile(join(checkout, '.parley', 'run.json'), JSON.stringify(run));
    assert.equal(localBackbone({}, deep).natsUrl, 'nats://127.0.0.1:4333');
    assert.equal(localBackbone({}, deep).natsUrlFrom, 'run.json');
    assert.equal(localBackbone({ NATS_URL: 'nats://elsewhere:4222' }, deep).natsUrl, 'nats://elsewhere:4222');

    // PARLEY_HOME wins, relative to the working directory.
    assert.equal(localBackbone({ PARLEY_HOME: 'p' }, deep).home, join(deep, 'p'));
    // Nothing found: ./.parley, so the refusal names where it looked.
    assert.equal(localBackbone({}, dir).home, join(dir, '.parley'));
  });
});
