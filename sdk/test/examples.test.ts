import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Delivery } from '@parley/sdk';
import { startParley, type TestParley, waitFor } from '@parley/test/harness';

describe('sdk/examples', () => {
  let parley: TestParley;
  before(async () => {
    parley = await startParley();
  });
  after(async () => {
    await parley?.destroy();
  });

  it('echo-agent answers a mention in the room it was invited to', async () => {
    const echo = await parley.participant();
    const credsFile = join(parley.home.paths.credsDir, 'echo.creds');
    await writeFile(credsFile, echo.creds);
    const child = spawn(process.execPath, ['sdk/examples/echo-agent.ts', credsFile], {
      cwd: resolve(import.meta.dirname, '../..'),
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NATS_URL: parley.natsUrl },
    });
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      out += d;
    });
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    try {
      await waitFor(() => out.includes('is listening'), 'the example to start', 20_000);
      const me = await parley.participant();
      const user = await parley.connect(me.creds);
      const answers: Delivery[] = [];
      user.on('message', (d) => {
        answers.push(d);
      });
      await user.listening;
      const room = await user.rooms.create('echo test', { members: [echo.id] });
      const asked = await room.send('hello there', { mentions: [echo.id] });
      await room.send('not for the echo');
      await waitFor(() => answers.length === 1, 'the echo');
      const reply = answers[0]?.message;
      assert.equal(reply?.sender.id, echo.id);
      assert.deepEqual(reply?.parts, [{ type: 'text', text: 'echo: hello there' }]);
      assert.equal(reply?.replyTo, asked.id);
      assert.equal(reply?.causedBy, asked.id);
      assert.equal(reply?.hop, 1);
      await waitFor(() => out.includes(`${room.id} #`), 'the room events printed');
      child.kill('SIGTERM');
      assert.equal(await exited, 0);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });
});
