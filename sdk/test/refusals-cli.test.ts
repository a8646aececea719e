import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { limits } from '@parley/contracts';
import { runCli } from '@parley/sdk/cli';
import { freePort, startParley, type TestParley } from '@parley/test/harness';

/**
 * The walls a newcomer hit in the first hour: each refusal says what is wrong and what to do, and
 * the commands the tour needs exist (agent update, --scope, send from stdin or a file, user list).
 */
describe('parley CLI: refusals that say what to do, and the commands the tour needs', () => {
  let parley: TestParley;
  let dir: string;
  let stdin = '';
  const run = async (args: string[], as?: string, env: Record<string, string> = {}) => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runCli(
      [...args, '--server', parley.natsUrl, '--as', as ?? parley.home.paths.adminCreds],
      { out: (l) => out.push(l), err: (l) => err.push(l), readStdin: async () => stdin },
      { ...process.env, HOME: dir, ...env },
    );
    return { code, out: out.join('\n'), err: err.join('\n') };
  };
  const json = async (args: string[], as?: string) => {
    const r = await run(['--json', ...args], as);
    assert.equal(r.code, 0, r.err);
    return JSON.parse(r.out);
  };
  const file = (name: string) => join(dir, name);

  before(async () => {
    parley = await startParley();
    dir = await mkdtemp(join(tmpdir(), 'parley-cli-'));
  });
  after(async () => {
    await parley?.destroy();
    await rm(dir, { recursive: true, force: true });
  });

  it('damaged creds are INVALID_ARGUMENT naming the file and the fault; refused ones UNAUTHENTICATED with the agent id', async () => {
    writeFileSync(file('garbage.creds'), 'not creds at all\n');
    const garbage = await run(['whoami'], file('garbage.creds'));
    assert.equal(garbage.code, 1);
    assert.match(
      garbage.err,
      new RegExp(`^INVALID_ARGUMENT: creds file ${file('garbage.creds')} is damaged: no NATS user JWT block`),
    );
    // A seed cut short (a bad copy-paste): the JWT still decodes, the key does not. The seed's own
    // line: the JWT's base64 can hold an "SU" run too, and cutting that damages the JWT instead.
    const admin = readFileSync(parley.home.paths.adminCreds, 'utf8');
    writeFileSync(file('cut.creds'), admin.replace(/^(SU[A-Z0-9]{10})[A-Z0-9]+$/m, '$1'));
    const cut = await run(['whoami'], file('cut.creds'));
    assert.equal(cut.code, 1);
    assert.match(
      cut.err,
      /^INVALID_ARGUMENT: creds file .*cut\.creds is damaged: its NKEY seed does not parse/,
    );

    const a = await json(['agent', 'create', 'rotated', '--out', file('rotated.creds')]);
    assert.equal((await run(['agent', 'rotate', a.id, '--out', file('rotated2.creds')])).code, 0);
    const old = await run(['whoami'], file('rotated.creds'));
    assert.equal(old.code, 1);
    assert.match(old.err, new RegExp(`^UNAUTHENTICATED: the server refused the creds of ${a.id} \\(`));
    assert.match(old.err, /rotated or revoked/);
  });

  it('agent create --scope/--tool and agent update change the card; token issue then delegates the scope', async () => {
    const org = await json(['org', 'create', 'scopes-org']);
    await json(['user', 'create', 'grace', '--org', org.id, '--out', file('grace.creds')]);
    const grace = await json(['whoami'], file('grace.creds'));
    const created = await json(
      [
        'agent',
        'create',
        'triage',
        '--scope',
        'repo:read',
        '--tool',
        'git.diff',
        '--out',
        file('triage.creds'),
      ],
      file('grace.creds'),
    );
    const shown = await json(['agent', 'show', created.id]);
    assert.deepEqual(shown.agent.card.scopes, ['repo:read']);
    assert.deepEqual(shown.agent.card.tools, ['git.diff']);
    // Before the update the card lists no tickets scope: issuing it is refused, saying why.
    assert.equal((await run(['policy', 'grants', grace.id, 'tickets:*'])).code, 0);
    const early = await run(['token', 'issue', created.id, '--scope', 'tickets:*'], file('grace.creds'));
    assert.equal(early.code, 1);
    assert.match(early.err, /its card lists repo:read/);
    const updated = await json(
      [
        'agent',
        'update',
        created.id,
        '--scope',
        'tickets:*',
        '--remove-tool',
        'git.diff',
        '--tool',
        'tickets.read',
        '--visibility',
        'public',
        '--description',
        'Sorts tickets',
      ],
      file('grace.creds'),
    );
    assert.deepEqual(updated.card.scopes, ['repo:read', 'tickets:*']);
    assert.deepEqual(updated.card.tools, ['tickets.read']);
    assert.equal(updated.card.visibility, 'public');
    assert.equal(updated.card.description, 'Sorts tickets');
    assert.equal(updated.revision, shown.agent.revision + 1);
    const token = await json(['token', 'issue', created.id, '--scope', 'tickets:*'], file('grace.creds'));
    assert.deepEqual(token.scope, ['tickets:*']);
    // Only its owner changes a card.
    const other = await run(['agent', 'update', created.id, '--description', 'mine now']);
    assert.equal(other.code, 1);
    assert.match(other.err, /^PERMISSION_DENIED: /);
  });

  it('send takes the text from stdin (-) or --file, and refuses an oversize one with PAYLOAD_TOO_LARGE and the limit', async () => {
    const room = await json(['room', 'create', 'big texts']);
    // Larger than one command-line argument may be (128 KiB on Linux), smaller than a text part.
    stdin = 'x'.repeat(120 * 1024);
    const fromStdin = await run(['send', room.id, '-']);
    assert.equal(fromStdin.code, 0, fromStdin.err);
    writeFileSync(file('notes.md'), '# notes\nline two\n');
    const fromFile = await run(['send', room.id, '--file', file('notes.md')]);
    assert.equal(fromFile.code, 0, fromFile.err);
    const history = await json(['history', room.id, '--limit', '2']);
    const texts = history.entries.map(
      (e: { message: { parts: { text: string }[] } }) => e.message.parts[0]?.text,
    );
    assert.deepEqual(texts, ['# notes\nline two\n', stdin]);

    writeFileSync(file('huge.txt'), 'y'.repeat(limits.maxTextChars + 1));
    const huge = await run(['send', room.id, '--file', file('huge.txt')]);
    assert.equal(huge.code, 1);
    assert.match(
      huge.err,
      new RegExp(`^PAYLOAD_TOO_LARGE: .*huge\\.txt is ${limits.maxTextChars + 1} characters`),
    );
    assert.match(
      huge.err,
      new RegExp(`at most ${limits.maxTextChars} characters of text and ${limits.maxMessageBytes} bytes`),
    );
    const empty = await run(['send', room.id]);
    assert.equal(empty.code, 1);
    assert.match(empty.err, /^INVALID_ARGUMENT: no text given/);
    // Nothing of the refused ones was stored.
    const stored = (await json(['history', room.id, '--limit', '20'])).entries.filter(
      (e: { message: { kind: string } }) => e.message.kind === 'message',
    );
    assert.equal(stored.length, 2);
  });

  it('connect --transport http prints a revoke command that works', async () => {
    const r = await run([
      'connect',
      'cursor',
      '--name',
      'http-pair',
      '--dir',
      dir,
      '--transport',
      'http',
      '--url',
      'http://127.0.0.1:7/mcp',
    ]);
    assert.equal(r.code, 0, r.err);
    const revoke = r.out.match(/npx parley (token revoke mtk_\w+)/)?.[1];
    assert.ok(revoke, r.out);
    const revoked = await run(revoke.split(' '));
    assert.equal(revoked.code, 0, revoked.err);
    assert.match(revoked.out, /^mtk_\w+: MCP token revoked$/);
  });

  it('a cross-org agent it cannot see: the NO_CONSENT hint and the contact request agree', async () => {
    const orgA = await json(['org', 'create', 'org-a']);
    const orgB = await json(['org', 'create', 'org-b']);
    await json(['user', 'create', 'ann', '--org', orgA.id, '--out', file('ann.creds')]);
    await json(['user', 'create', 'ben', '--org', orgB.id, '--out', file('ben.creds')]);
    const reviewer = await json(
      ['agent', 'create', 'reviewer', '--out', file('a-reviewer.creds')],
      file('ann.creds'),
    );
    await json(['agent', 'create', 'auditor', '--out', file('b-auditor.creds')], file('ben.creds'));
    const refused = await run(['room', 'create', 'audit', '--member', reviewer.id], file('b-auditor.creds'));
    assert.equal(refused.code, 1);
    assert.match(refused.err, /^NO_CONSENT: /);
    // No hint to send a request that would be refused: it says what can be done instead.
    assert.doesNotMatch(refused.err, /can ask with parley contact request/);
    assert.match(refused.err, new RegExp(`${reviewer.id} is not visible to agt_\\w+`));
    assert.match(refused.err, new RegExp(`parley agent update ${reviewer.id} --visibility public`));
    const asked = await run(
      ['contact', 'request', reviewer.id, '--reason', 'audit'],
      file('b-auditor.creds'),
    );
    assert.equal(asked.code, 1);
    assert.match(asked.err, new RegExp(`^NOT_FOUND: ${reviewer.id} does not exist or is not visible to`));
    // Its owner makes it visible: now the hint names the request, and the request goes through.
    await json(['agent', 'update', reviewer.id, '--visibility', 'public'], file('ann.creds'));
    const hinted = await run(['room', 'create', 'audit', '--member', reviewer.id], file('b-auditor.creds'));
    assert.match(hinted.err, new RegExp(`can ask with parley contact request ${reviewer.id}`));
    const ok = await run(['contact', 'request', reviewer.id, '--reason', 'audit'], file('b-auditor.creds'));
    assert.equal(ok.code, 0, ok.err);
  });

  it('the smaller ones: budget set without a limit refuses, user list, usage by room says “no room”', async () => {
    const a = await json(['agent', 'create', 'budgeted', '--out', file('budgeted.creds')]);
    const none = await run(['budget', 'set', '--agent', a.id]);
    assert.equal(none.code, 1);
    assert.match(none.err, /^INVALID_ARGUMENT: a budget needs a limit: give --tokens-per-day/);
    assert.equal((await run(['budget', 'set', '--agent', a.id, '--tokens-per-day', '1000'])).code, 0);

    // A home whose backbone crashed: its run.json names a server nothing answers on. Said so.
    const crashed: string[] = [];
    const home = join(dir, 'crashed-home');
    await mkdir(join(home, 'creds'), { recursive: true });
    await copyFile(parley.home.paths.adminCreds, join(home, 'creds', 'admin.creds'));
    const deadUrl = `nats://127.0.0.1:${await freePort()}`;
    const staleRun = {
      pid: 999999,
      natsUrl: deadUrl,
      httpUrl: 'http://127.0.0.1:9',
      home,
      startedAt: 'then',
    };
    writeFileSync(join(home, 'run.json'), JSON.stringify(staleRun));
    const code = await runCli(
      ['whoami'],
      { out: (l) => crashed.push(l), err: (l) => crashed.push(l) },
      { ...process.env, PARLEY_HOME: home, NATS_URL: undefined },
    );
    assert.equal(code, 1);
    assert.match(
      crashed.join('\n'),
      new RegExp(
        `^UNAVAILABLE: cannot reach NATS at ${deadUrl}.*run\\.json names a backbone \\(pid 999999.*npm start`,
      ),
    );

    // --help says what the CLI reads from the environment.
    const help: string[] = [];
    assert.equal(await runCli(['--help'], { out: (l) => help.push(l), err: (l) => help.push(l) }), 0);
    assert.match(help.join('\n'), /Environment:\n {2}PARLEY_HOME .*\n {2}NATS_URL .*run\.json/);

    const people = await run(['user', 'list']);
    assert.equal(people.code, 0, people.err);
    assert.match(people.out, /^ID\s+NAME\s+ROLE/);
    assert.match(people.out, new RegExp(`${parley.home.state.admin.id}\\s+admin\\s+admin, superadmin`));

    const agent = await parley.connect(file('budgeted.creds'));
    await agent.usage.report({ model: 'm', inputTokens: 10, outputTokens: 2, costUsd: 0.001 });
    const usage = await run(['usage', '--by', 'room', '--agent', a.id]);
    assert.equal(usage.code, 0, usage.err);
    assert.match(usage.out, /^no room\s+10\s+2/m);
  });
});
