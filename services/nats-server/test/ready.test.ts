/**
 * The launcher sees "Server is ready" wherever it falls in the output. A clustered node recovering
 * its Raft groups writes thousands of lines at once; when one chunk of output held the line early
 * and more than the kept tail after it, the launcher missed it and reported a running node as "not
 * ready" after its timeout (the 3-node crash tests failed that way under load). The process here
 * stands in for nats-server's output only: it writes the line and 20 kB more in one write.
 */
import assert from 'node:assert/strict';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { startNatsServer } from '@parley/nats-server';

describe('nats-server launcher readiness', () => {
  let dir: string | undefined;
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('sees "Server is ready" followed by a burst of output in the same chunk', async () => {
    dir = await mkdtemp(join(tmpdir(), 'parley-ready-'));
    const bin = join(dir, 'fake-nats-server');
    // One write: the ready line, then 20,000 characters of "recovery" log; then it stays up.
    await writeFile(
      bin,
      `#!/usr/bin/env node\nprocess.stderr.write('[1] [INF] Server is ready\\n' + 'x'.repeat(20000) + '\\n');\nsetInterval(() => {}, 1000);\n`,
    );
    await chmod(bin, 0o755);
    const started = Date.now();
    const server = await startNatsServer({
      bin,
      configPath: join(dir, 'nats.conf'),
      logPath: join(dir, 'nats.log'),
      config: { serverName: 'n1', host: '127.0.0.1', port: 1, storeDir: join(dir, 'js') },
      readyTimeoutMs: 20_000,
    });
    try {
      assert.ok(server.running);
      assert.ok(Date.now() - started < 20_000, 'ready before the timeout');
    } finally {
      await server.kill9();
    }
  });
});
