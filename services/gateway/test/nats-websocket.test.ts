/**
 * Remote agents over the NATS WebSocket listener (what a laptop reaches through an Ingress): the
 * SDK connects with `ws://` and its creds, talks and receives like over TCP, with the same
 * operator-mode auth; `parley connect claude-code --server ws://…` configures a session that uses it.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  createAccount,
  createOperator,
  createUser,
  encodeAccount,
  encodeOperator,
  encodeUser,
  fmtCreds,
} from '@nats-io/jwt';
import { connect } from '@parley/sdk';
import { runCli } from '@parley/sdk/cli';
import {
  codeOf,
  connectAdmin,
  createAgent,
  createHuman,
  startParley,
  type TestParley,
  waitFor,
} from '@parley/test/harness';

describe('NATS over WebSocket', () => {
  let parley: TestParley;
  let ws: string;
  before(async () => {
    parley = await startParley();
    ws = parley.natsWsUrl as string;
  });
  after(async () => {
    await parley?.destroy();
  });

  it('the SDK connects with ws:// and creds, sends and receives', async () => {
    assert.match(ws, /^ws:\/\/127\.0\.0\.1:\d+$/);
    const admin = await connectAdmin(parley);
    const { agent: a, creds: aCreds } = await createAgent(admin, { name: 'laptop-a' });
    const { agent: b, creds: bCreds } = await createAgent(admin, { name: 'laptop-b' });
    await admin.close();
    const remoteA = await connect({ servers: ws, creds: aCreds, presence: false });
    const remoteB = await connect({ servers: ws, creds: bCreds, presence: false });
    try {
      assert.equal((await remoteA.whoami()).id, a.id);
      const got: string[] = [];
      remoteB.on('message', (d) => {
        got.push((d.message.parts[0] as { text: string }).text);
      });
      await remoteB.listening;
      const room = await remoteA.rooms.create('over ws', { members: [b.id] });
      await room.send('hello from a laptop');
      await waitFor(() => got.includes('hello from a laptop'), 'delivery over the WebSocket');
    } finally {
      await remoteA.close();
      await remoteB.close();
    }
  });

  it('refuses creds the deployment did not sign', async () => {
    const op = createOperator();
    const acct = createAccount();
    const user = createUser();
    await encodeOperator('other', op);
    await encodeAccount('X', acct, {}, { signer: op });
    const jwt = await encodeUser('agt_01J00000000000000000000000', user, acct);
    const creds = new TextDecoder().decode(fmtCreds(jwt, user));
    assert.equal(await codeOf(connect({ servers: ws, creds, presence: false })), 'UNAUTHENTICATED');
  });

  it('parley connect claude-code --server ws://… configures a session that connects over it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'parley-ws-'));
    try {
      const admin = await connectAdmin(parley);
      const g = await createHuman(admin, { org: parley.home.state.org.id, name: 'remote-dev' });
      await admin.close();
      const credsFile = join(dir, 'dev.creds');
      await writeFile(credsFile, g.creds, { mode: 0o600 });
      const project = join(dir, 'project');
      await mkdir(project);
      const err: string[] = [];
      const code = await runCli(
        [
          'connect',
          'claude-code',
          '--name',
          'laptop-session',
          '--dir',
          project,
          '--as',
          credsFile,
          '--server',
          ws,
        ],
        { out: () => undefined, err: (l) => err.push(l) },
        { HOME: join(dir, 'home') },
      );
      assert.equal(code, 0, err.join('\n'));
      const config = JSON.parse(await readFile(join(project, '.mcp.json'), 'utf8')) as {
        mcpServers: { parley: { args: string[] } };
      };
      const args = config.mcpServers.parley.args;
      assert.equal(args[args.indexOf('--server') + 1], ws);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
