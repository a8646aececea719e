import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { runCli } from '@parley/sdk/cli';
import { startParley, type TestParley } from '@parley/test/harness';

function capture() {
  const lines = { out: [] as string[], err: [] as string[] };
  return { io: { out: (l: string) => lines.out.push(l), err: (l: string) => lines.err.push(l) }, lines };
}

describe('parley CLI', () => {
  let parley: TestParley;
  before(async () => {
    parley = await startParley();
  });
  after(async () => {
    await parley?.destroy();
  });

  it('whoami prints the admin, and --json an object with its id', async () => {
    const creds = parley.home.paths.adminCreds;
    const { io, lines } = capture();
    assert.equal(await runCli(['whoami', '--as', creds, '--server', parley.natsUrl], io), 0);
    assert.match(lines.out.join('\n'), new RegExp(`${parley.home.state.admin.id}\\s+human\\s+admin`));
    const j = capture();
    assert.equal(await runCli(['--json', 'whoami', '--as', creds, '--server', parley.natsUrl], j.io), 0);
    assert.equal(JSON.parse(j.lines.out.join('\n')).id, parley.home.state.admin.id);
  });

  it('defaults to the admin creds of PARLEY_HOME', async () => {
    const { io, lines } = capture();
    const code = await runCli(['whoami', '--server', parley.natsUrl], io, {
      PARLEY_HOME: parley.home.paths.home,
    });
    assert.equal(code, 0, lines.err.join('\n'));
    assert.match(lines.out.join('\n'), new RegExp(parley.home.state.admin.id));
  });

  it('prints the code of a refusal and exits non-zero', async () => {
    const { io, lines } = capture();
    assert.equal(await runCli(['whoami', '--as', '/nonexistent.creds', '--server', parley.natsUrl], io), 1);
    assert.match(lines.err.join('\n'), /^INVALID_ARGUMENT: cannot read creds file/);
    const u = capture();
    assert.equal(await runCli(['frobnicate'], u.io), 1);
    assert.match(u.lines.err.join('\n'), /unknown command 'frobnicate'/);
  });
});
