import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
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

  it('creates a room, invites, sends, tails and reads history', async () => {
    const bob = await parley.participant();
    const server = ['--server', parley.natsUrl];
    const admin = ['--as', parley.home.paths.adminCreds];
    const created = capture();
    assert.equal(await runCli(['--json', 'room', 'create', 'cli room', ...admin, ...server], created.io), 0);
    const room = JSON.parse(created.lines.out.join('\n')) as { id: string; members: { id: string }[] };
    assert.match(room.id, /^room_/);
    const invited = capture();
    assert.equal(
      await runCli(['room', 'invite', room.id, bob.id, ...admin, ...server], invited.io),
      0,
      invited.lines.err.join('\n'),
    );
    assert.match(invited.lines.out.join('\n'), new RegExp(`${bob.id} joined ${room.id} as member`));
    for (const t of ['first words', 'second words']) {
      const sent = capture();
      assert.equal(await runCli(['send', room.id, ...t.split(' '), ...admin, ...server], sent.io), 0);
      assert.match(sent.lines.out.join('\n'), /^msg_\w+ #\d+$/);
    }
    const bobCreds = join(parley.home.paths.credsDir, 'bob.creds');
    await writeFile(bobCreds, bob.creds);
    const tail = capture();
    assert.equal(
      await runCli(['tail', '--count', '3', '--as', bobCreds, ...server], tail.io),
      0,
      tail.lines.err.join('\n'),
    );
    assert.equal(tail.lines.out.length, 3);
    assert.match(tail.lines.out[0] ?? '', new RegExp(`· ${bob.id} joined \\(member\\)$`));
    assert.match(
      tail.lines.out[1] ?? '',
      new RegExp(`^\\[${room.id}\\] #\\d+ ${parley.home.state.admin.id}: first words$`),
    );
    assert.match(tail.lines.out[2] ?? '', /: second words$/);
    const history = capture();
    assert.equal(
      await runCli(['history', room.id, '--limit', '2', '--as', bobCreds, ...server], history.io),
      0,
    );
    assert.deepEqual(
      history.lines.out
        .join('\n')
        .split('\n')
        .map((l) => l.replace(/^#\d+ \S+: /, '')),
      ['second words', 'first words', '…'],
    );
    const list = capture();
    assert.equal(await runCli(['room', 'list', '--as', bobCreds, ...server], list.io), 0);
    assert.match(list.lines.out.join('\n'), new RegExp(`${room.id}  cli room  member  2 members`));
  });

  it('prints the code of a refusal and exits non-zero', async () => {
    const outsider = await parley.participant();
    const outsiderCreds = join(parley.home.paths.credsDir, 'outsider.creds');
    await writeFile(outsiderCreds, outsider.creds);
    const created = capture();
    await runCli(
      [
        '--json',
        'room',
        'create',
        'private',
        '--as',
        parley.home.paths.adminCreds,
        '--server',
        parley.natsUrl,
      ],
      created.io,
    );
    const roomId = (JSON.parse(created.lines.out.join('\n')) as { id: string }).id;
    const refused = capture();
    assert.equal(
      await runCli(['send', roomId, 'hi', '--as', outsiderCreds, '--server', parley.natsUrl], refused.io),
      1,
    );
    assert.match(refused.lines.err.join('\n'), /^NOT_A_MEMBER: /);
    const { io, lines } = capture();
    assert.equal(await runCli(['whoami', '--as', '/nonexistent.creds', '--server', parley.natsUrl], io), 1);
    assert.match(lines.err.join('\n'), /^INVALID_ARGUMENT: cannot read creds file/);
    const u = capture();
    assert.equal(await runCli(['frobnicate'], u.io), 1);
    assert.match(u.lines.err.join('\n'), /unknown command 'frobnicate'/);
  });
});
