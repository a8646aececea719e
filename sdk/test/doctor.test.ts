import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { describeServer, losesConsumerState, serverDefects } from '@parley/contracts';
import { runCli } from '@parley/sdk/cli';
import { freePort, startParley, type TestParley } from '@parley/test/harness';

function capture() {
  const lines = { out: [] as string[], err: [] as string[] };
  return { io: { out: (l: string) => lines.out.push(l), err: (l: string) => lines.err.push(l) }, lines };
}

describe('nats-server known defects', () => {
  it('names the defects of a version and what Parley does about each', () => {
    assert.deepEqual(
      serverDefects('2.9.10').map((d) => [d.id, d.status]),
      [
        ['lost-pull-timeout', 'mitigated'],
        ['inactive-push-consumer', 'mitigated'],
        ['consumer-state-reset', 'upgrade'],
      ],
    );
    assert.deepEqual(
      serverDefects('2.9.16').map((d) => d.id),
      ['inactive-push-consumer', 'consumer-state-reset'],
    );
    assert.deepEqual(
      serverDefects('2.10.21').map((d) => d.id),
      ['inactive-push-consumer', 'consumer-state-reset', 'kill9-stream-loss'],
    );
    assert.deepEqual(
      serverDefects('2.10.28').map((d) => d.id),
      ['consumer-state-reset'],
    );
    assert.deepEqual(
      serverDefects('2.11.1').map((d) => d.id),
      ['inactive-push-consumer', 'consumer-state-reset'],
    );
    assert.deepEqual(
      serverDefects('2.11.2').map((d) => d.id),
      ['consumer-state-reset'],
    );
    assert.deepEqual(serverDefects('2.11.11'), []);
    assert.deepEqual(
      serverDefects('2.12.0').map((d) => d.id),
      ['consumer-state-reset', 'jepsen-2.12.1'],
    );
    assert.deepEqual(
      serverDefects('v2.12.1').map((d) => [d.id, d.status]),
      [['jepsen-2.12.1', 'upgrade']],
    );
    assert.deepEqual(serverDefects('2.12.3'), []);
    assert.equal(
      describeServer('2.9.10'),
      'nats-server 2.9.10: lost-pull-timeout (handled), inactive-push-consumer (handled), consumer-state-reset (fixed in 2.11.11 and 2.12.1: upgrade) — parley doctor says what each is and what Parley does',
    );
    assert.equal(describeServer('2.12.3'), 'nats-server 2.12.3: no known defect that affects Parley');
    assert.match(describeServer('2.8.4'), /not supported/);
  });

  it('records consumer floors only where a server can lose a consumer’s state (or says no version)', () => {
    assert.deepEqual(
      ['2.9.10', '2.10.29', '2.11.10', '2.11.11', '2.12.0', '2.12.1', '2.12.3', '', undefined, 'x'].map(
        losesConsumerState,
      ),
      [true, true, true, false, true, false, false, true, true, true],
    );
  });
});

describe('parley doctor', () => {
  let parley: TestParley;
  before(async () => {
    parley = await startParley();
  });
  after(async () => {
    await parley?.destroy();
  });

  it('passes against a running Parley: server version, the defect handled, whose creds, the inbox', async () => {
    const { io, lines } = capture();
    const code = await runCli(['doctor', '--server', parley.natsUrl], io, {
      PARLEY_HOME: parley.home.paths.home,
    });
    const out = lines.out.join('\n');
    assert.equal(code, 0, `${out}\n${lines.err.join('\n')}`);
    assert.match(out, /✓ server\s+.*reachable: nats-server \d+\.\d+\.\d+/);
    assert.match(out, new RegExp(`✓ identity\\s+${parley.home.state.admin.id}\\s+human`));
    assert.match(out, /✓ inbox\s+push consumer/);
    assert.match(out, /clock/);
    const j = capture();
    await runCli(['--json', 'doctor', '--server', parley.natsUrl], j.io, {
      PARLEY_HOME: parley.home.paths.home,
    });
    const checks = JSON.parse(j.lines.out.join('\n')) as { name: string; status: string }[];
    assert.ok(
      checks.every((c) => c.status !== 'fail'),
      JSON.stringify(checks),
    );
  });

  it('--home names the home as npm start --home does, over PARLEY_HOME', async () => {
    const { io, lines } = capture();
    const code = await runCli(['--home', parley.home.paths.home, 'doctor', '--server', parley.natsUrl], io, {
      PARLEY_HOME: '/nonexistent-parley-home',
    });
    const out = lines.out.join('\n');
    assert.equal(code, 0, `${out}\n${lines.err.join('\n')}`);
    assert.match(out, new RegExp(`✓ home\\s+${parley.home.paths.home}`));
    assert.match(out, new RegExp(`✓ identity\\s+${parley.home.state.admin.id}\\s+human`));
  });

  it('fails with the fix when no server answers, and when the creds are missing', async () => {
    const down = capture();
    const url = `nats://127.0.0.1:${await freePort()}`;
    assert.equal(
      await runCli(['doctor', '--server', url], down.io, { PARLEY_HOME: parley.home.paths.home }),
      1,
    );
    assert.match(down.lines.out.join('\n'), /✗ server .*\n\s+fix: .*npm start/);
    const none = capture();
    assert.equal(
      await runCli(['doctor', '--as', '/nonexistent/x.creds', '--server', parley.natsUrl], none.io, {}),
      1,
    );
    assert.match(none.lines.out.join('\n'), /✗ creds\s+\/nonexistent\/x\.creds: cannot read creds file/);
    assert.match(none.lines.err.join('\n'), /1 check\(s\) failed: creds/);
  });
});
