import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { ContactRequest } from '@parley/contracts';
import { runCli } from '@parley/sdk/cli';
import {
  connectAdmin,
  connectTo,
  createAgent,
  createHuman,
  startParley,
  type TestParley,
} from '@parley/test/harness';

function capture() {
  const lines = { out: [] as string[], err: [] as string[] };
  return { io: { out: (l: string) => lines.out.push(l), err: (l: string) => lines.err.push(l) }, lines };
}

describe('parley contact', () => {
  let parley: TestParley;
  const creds: Record<string, string> = {};
  const ids: Record<string, string> = {};

  before(async () => {
    parley = await startParley();
    const admin = await connectAdmin(parley);
    const org = parley.home.state.org.id;
    for (const person of ['ann', 'ben']) {
      const h = await createHuman(admin, { org, name: person });
      ids[person] = h.user.id;
      creds[person] = join(parley.home.paths.credsDir, `${person}.creds`);
      await writeFile(creds[person] as string, h.creds, { mode: 0o600 });
      const conn = await connectTo(parley, h.creds);
      const a = await createAgent(conn, { name: `${person}-bot` });
      await conn.close();
      ids[`${person}-bot`] = a.agent.id;
      creds[`${person}-bot`] = join(parley.home.paths.credsDir, `${person}-bot.creds`);
      await writeFile(creds[`${person}-bot`] as string, a.creds, { mode: 0o600 });
    }
    await admin.close();
  });
  after(async () => {
    await parley?.destroy();
  });

  const cli = async (who: string, ...args: string[]) => {
    const c = capture();
    const code = await runCli([...args, '--as', creds[who] as string, '--server', parley.natsUrl], c.io);
    return { code, out: c.lines.out.join('\n'), err: c.lines.err.join('\n') };
  };

  it('requests (--json with the id), lists pending, accepts, lists contacts, invites, revokes', async () => {
    const annBot = ids['ann-bot'] as string;
    const benBot = ids['ben-bot'] as string;
    const requested = await cli(
      'ann-bot',
      '--json',
      'contact',
      'request',
      benBot,
      '--reason',
      'review my plan',
    );
    assert.equal(requested.code, 0, requested.err);
    const req = JSON.parse(requested.out) as ContactRequest;
    assert.match(req.id, /^creq_/);
    assert.equal(req.state, 'pending');

    const pending = await cli('ben-bot', 'contact', 'pending');
    assert.equal(pending.code, 0, pending.err);
    assert.match(
      pending.out,
      new RegExp(`^in {3}${req.id} {2}pending {2}${annBot} → ${benBot} {2}“review my plan”`),
    );
    // The owner sees it too, and may answer for its agent.
    assert.match((await cli('ben', 'contact', 'pending')).out, new RegExp(req.id));

    const room = await cli('ann-bot', '--json', 'room', 'create', 'plan');
    const roomId = (JSON.parse(room.out) as { id: string }).id;
    const refused = await cli('ann-bot', 'room', 'invite', roomId, benBot);
    assert.equal(refused.code, 1);
    assert.match(refused.err, /^NO_CONSENT: /);

    const accepted = await cli('ben', 'contact', 'accept', req.id);
    assert.equal(accepted.code, 0, accepted.err);
    assert.match(accepted.out, new RegExp(`${req.id} {2}accepted .* accepted by ${ids.ben}`));
    assert.match(
      (await cli('ann-bot', 'contact', 'list')).out,
      new RegExp(`^${benBot} {2}contact since .* \\(request, ${req.id}\\)$`),
    );
    const listed = await cli('ben', '--json', 'contact', 'list', '--of', benBot);
    assert.deepEqual(
      (JSON.parse(listed.out) as { contacts: { with: string }[] }).contacts.map((c) => c.with),
      [annBot],
    );
    const invited = await cli('ann-bot', 'room', 'invite', roomId, benBot);
    assert.equal(invited.code, 0, invited.err);

    const revoked = await cli('ben-bot', 'contact', 'revoke', annBot);
    assert.equal(revoked.code, 0, revoked.err);
    assert.equal((await cli('ann-bot', 'contact', 'list')).out, '(no contacts)');
  });

  it('rejects and blocks; a refusal prints its code and exits 1', async () => {
    const annBot = ids['ann-bot'] as string;
    const ben = ids.ben as string;
    const first = JSON.parse(
      (await cli('ann-bot', '--json', 'contact', 'request', ben, '--reason', 'hi')).out,
    ) as ContactRequest;
    const rejected = await cli('ben', 'contact', 'reject', first.id);
    assert.equal(rejected.code, 0, rejected.err);
    assert.match(rejected.out, /rejected by/);
    const twice = await cli('ben', 'contact', 'accept', first.id);
    assert.equal(twice.code, 1);
    assert.match(twice.err, /^CONFLICT: .*rejected already/);

    const second = JSON.parse(
      (await cli('ann-bot', '--json', 'contact', 'request', ben, '--reason', 'again')).out,
    ) as ContactRequest;
    const blocked = await cli('ben', 'contact', 'block', second.id);
    assert.equal(blocked.code, 0, blocked.err);
    const third = await cli('ann-bot', 'contact', 'request', ben, '--reason', 'please');
    assert.equal(third.code, 1);
    assert.match(third.err, /^BLOCKED: /);
    assert.match((await cli('ben', 'contact', 'list')).out, new RegExp(`^${annBot} {2}blocked since`));
    assert.equal((await cli('ben', 'contact', 'unblock', annBot)).code, 0);
    assert.equal((await cli('ann-bot', 'contact', 'request', ben, '--reason', 'thanks')).code, 0);

    const self = await cli('ann-bot', 'contact', 'request', annBot, '--reason', 'me');
    assert.equal(self.code, 1);
    assert.match(self.err, /^INVALID_ARGUMENT: /);
    const policy = await cli('ann', 'contact', 'policy', annBot, 'whenever');
    assert.equal(policy.code, 1);
    assert.match(policy.err, /^INVALID_ARGUMENT: /);
    assert.equal((await cli('ann', 'contact', 'policy', annBot, 'owner_decides')).code, 0);
  });
});
