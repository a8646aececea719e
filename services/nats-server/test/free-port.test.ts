/**
 * `freePort` never hands two living processes the same port, also while neither has bound it: a
 * test's nats-server killed and restarted on its port leaves that port free in between, and a test
 * file running beside it was handed it and lost the bind (EADDRINUSE).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { describe, it } from 'node:test';
import { freePort } from '@parley/nats-server';

describe('freePort', () => {
  it('hands another living process none of the ports this one holds, bound or not', async () => {
    // 400 ports of the 16,384 below the ephemeral range, in each process: picked independently, the
    // two sets would share about 10 ports (none in fewer than 1 run in 10,000).
    const child = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `import { freePort } from ${JSON.stringify(import.meta.resolve('@parley/nats-server'))};
         const ports = [];
         for (let i = 0; i < 400; i++) ports.push(await freePort());
         process.stdout.write(JSON.stringify(ports) + '\\n');
         process.stdin.resume();`,
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    try {
      let out = '';
      child.stdout.setEncoding('utf8');
      while (!out.includes('\n')) out += (await once(child.stdout, 'data'))[0];
      const theirs = new Set<number>(JSON.parse(out));
      assert.equal(theirs.size, 400);
      const ours: number[] = [];
      for (let i = 0; i < 400; i++) ours.push(await freePort());
      assert.equal(new Set(ours).size, 400, 'one port handed twice in a process');
      assert.deepEqual(
        ours.filter((p) => theirs.has(p)),
        [],
      );
    } finally {
      child.kill('SIGKILL');
    }
  });
});
