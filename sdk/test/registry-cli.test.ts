import assert from 'node:assert/strict';
import { statSync, writeFileSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { isParleyError } from '@parley/contracts';
import { connect } from '@parley/sdk';
import { runCli } from '@parley/sdk/cli';
import { startParley, type TestParley } from '@parley/test/harness';

function capture() {
  const lines = { out: [] as string[], err: [] as string[] };
  return { io: { out: (l: string) => lines.out.push(l), err: (l: string) => lines.err.push(l) }, lines };
}

describe('parley CLI: orgs, people, agents, discovery', () => {
  let parley: TestParley;
  let dir: string;
  const run = async (args: string[], as?: string) => {
    const c = capture();
    const code = await runCli(
      [...args, '--server', parley.natsUrl, '--as', as ?? parley.home.paths.adminCreds],
      c.io,
    );
    return { code, out: c.lines.out.join('\n'), err: c.lines.err.join('\n') };
  };
  const json = async (args: string[], as?: string) => {
    const r = await run(['--json', ...args], as);
    assert.equal(r.code, 0, r.err);
    return JSON.parse(r.out);
  };
  const mode = (path: string) => statSync(path).mode & 0o777;

  before(async () => {
    parley = await startParley();
    dir = await mkdtemp(join(tmpdir(), 'parley-cli-'));
  });
  after(async () => {
    await parley?.destroy();
    await rm(dir, { recursive: true, force: true });
  });

  it('onboards an org, a person and an agent whose creds just work, then finds, shows, rotates and revokes it', async () => {
    const org = await json(['org', 'create', 'cli-org']);
    assert.match(org.id, /^org_/);
    const userFile = join(dir, 'grace.creds');
    const user = await json(['user', 'create', 'grace', '--org', org.id, '--out', userFile]);
    assert.match(user.id, /^usr_/);
    assert.equal(mode(userFile), 0o600);

    const cardFile = join(dir, 'card.json');
    writeFileSync(
      cardFile,
      JSON.stringify({
        description: 'Reviews pull requests',
        skills: [{ id: 'code.review', name: 'Code review', tags: ['git'] }],
        tools: ['git.diff'],
        scopes: ['repo:read'],
      }),
    );
    const botFile = join(dir, 'reviewer.creds');
    const bot = await json(
      [
        'agent',
        'create',
        'reviewer',
        '--card',
        cardFile,
        '--skill',
        'code.explain',
        '--skill',
        'triage',
        '--runtime',
        'claude-code',
        '--visibility',
        'org',
        '--out',
        botFile,
      ],
      userFile,
    );
    assert.match(bot.id, /^agt_/);
    assert.equal(bot.owner, user.id);
    assert.equal(mode(botFile), 0o600);

    // connect({ creds }) just works with the file it wrote.
    const agent = await connect({ servers: parley.natsUrl, creds: botFile, presence: false });
    assert.equal((await agent.whoami()).id, bot.id);
    await agent.close();
    const who = await json(['whoami'], botFile);
    assert.deepEqual([who.id, who.kind, who.owner], [bot.id, 'agent', user.id]);

    const list = await json(['agent', 'list', '--org', org.id], userFile);
    assert.equal(list.agents.length, 1);
    const [entry] = list.agents;
    assert.equal(entry.agent.owner, user.id);
    assert.equal(entry.agent.card.runtime, 'claude-code');
    assert.deepEqual(entry.agent.card.tools, ['git.diff']);
    assert.deepEqual(
      entry.agent.card.skills.map((s: { id: string }) => s.id),
      ['code.review', 'code.explain', 'triage'],
    );
    assert.equal(entry.presence.state, 'offline');
    const table = await run(['agent', 'list', '--org', org.id], userFile);
    assert.match(table.out, /^ID\s+NAME\s+OWNER\s+RUNTIME\s+VISIBILITY\s+PRESENCE/m);
    assert.match(
      table.out,
      new RegExp(`${bot.id}\\s+reviewer\\s+${user.id}\\s+claude-code\\s+org\\s+offline`),
    );

    const found = await json(['discover', '--skill', 'code.review'], userFile);
    assert.deepEqual(
      found.agents.map((a: { agent: { id: string } }) => a.agent.id),
      [bot.id],
    );
    const byText = await run(['discover', '--text', 'pull requests'], userFile);
    assert.match(byText.out, new RegExp(bot.id));
    const shown = await run(['agent', 'show', bot.id], userFile);
    assert.match(shown.out, /skill code\.review: Code review \[git\]/);

    const rotatedFile = join(dir, 'reviewer-2.creds');
    const rotated = await json(['agent', 'rotate', bot.id, '--out', rotatedFile], userFile);
    assert.equal(rotated.id, bot.id);
    assert.equal(mode(rotatedFile), 0o600);
    const old = await run(['whoami'], botFile);
    assert.equal(old.code, 1);
    assert.match(old.err, /^UNAUTHENTICATED: /);
    assert.equal((await json(['whoami'], rotatedFile)).id, bot.id);

    const revoked = await json(['agent', 'revoke', bot.id, '--reason', 'done'], userFile);
    assert.deepEqual(revoked, { id: bot.id, revoked: 1 });
    const after = await connect({ servers: parley.natsUrl, creds: rotatedFile, presence: false }).catch(
      (e) => e,
    );
    assert.ok(isParleyError(after, 'UNAUTHENTICATED'));
  });

  it('refuses to overwrite a creds file and creates nothing then; errors print their code', async () => {
    const existing = join(dir, 'taken.creds');
    writeFileSync(existing, 'keep me');
    const r = await run(['agent', 'create', 'never-made', '--out', existing]);
    assert.equal(r.code, 1);
    assert.match(r.err, /already exists/);
    assert.equal(await readFile(existing, 'utf8'), 'keep me');
    const found = await json(['discover', '--text', 'never-made']);
    assert.deepEqual(found.agents, []);

    const bad = await run([
      'agent',
      'create',
      'bad',
      '--skill',
      'Not Valid',
      '--out',
      join(dir, 'bad.creds'),
    ]);
    assert.equal(bad.code, 1);
    assert.match(bad.err, /^INVALID_ARGUMENT: .*skills\.0\.id/);
    const missing = await run(['agent', 'show', 'agt_01J0000000000000000000000A']);
    assert.match(missing.err, /^NOT_FOUND: /);
    const dup = await run(['org', 'create', 'local']);
    assert.match(dup.err, /^CONFLICT: /);
  });
});
