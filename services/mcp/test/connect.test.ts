/**
 * `parley connect claude-code|codex|cursor`: from nothing to a connected MCP session in one command;
 * correct configuration for each client, other entries kept, idempotent.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { readCreds } from '@parley/sdk';
import { runCli } from '@parley/sdk/cli';
import { connectAdmin, createHuman, createOrg, startParley, type TestParley } from '@parley/test/harness';
import { spawnBridge } from './helpers.js';

interface Connected {
  agent: string;
  agentChange: 'created' | 'reused';
  creds: string;
  config: string;
  configChange: string;
  seconds: number;
}

describe('parley connect', () => {
  let parley: TestParley;
  let dir: string;
  let home: string;
  let project: string;
  let graceCreds: string;
  let graceId: string;

  const connect = async (client: string, name: string, env: Record<string, string> = {}) => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runCli(
      [
        '--json',
        'connect',
        client,
        '--name',
        name,
        '--owner',
        graceId,
        '--dir',
        project,
        '--as',
        graceCreds,
        '--server',
        parley.natsUrl,
      ],
      { out: (l) => out.push(l), err: (l) => err.push(l) },
      { HOME: home, ...env },
    );
    assert.equal(code, 0, err.join('\n'));
    return JSON.parse(out.join('\n')) as Connected;
  };

  before(async () => {
    parley = await startParley();
    dir = await mkdtemp(join(tmpdir(), 'parley-connect-'));
    home = join(dir, 'home');
    project = join(dir, 'project');
    await mkdir(project, { recursive: true });
    const admin = await connectAdmin(parley);
    const org = await createOrg(admin, 'connect-org');
    const g = await createHuman(admin, { org: org.id, name: 'grace' });
    await admin.close();
    graceId = g.user.id;
    graceCreds = join(dir, 'grace.creds');
    await writeFile(graceCreds, g.creds, { mode: 0o600 });
  });
  after(async () => {
    await parley?.destroy();
    await rm(dir, { recursive: true, force: true });
  });

  it('claude-code: agent, creds (0600) and .mcp.json in one command; the configured server connects', async () => {
    await writeFile(
      join(project, '.mcp.json'),
      `${JSON.stringify({ mcpServers: { other: { command: 'other-server' } } }, null, 2)}\n`,
    );
    const started = performance.now();
    const r = await connect('claude-code', 'coder');
    assert.equal(r.agentChange, 'created');
    assert.equal(r.config, join(project, '.mcp.json'));
    assert.equal(r.configChange, 'added');
    assert.equal((await stat(r.creds)).mode & 0o777, 0o600);
    assert.equal((await readCreds(r.creds)).id, r.agent);
    const config = JSON.parse(await readFile(r.config, 'utf8')) as {
      mcpServers: Record<string, { type?: string; command: string; args: string[] }>;
    };
    assert.deepEqual(config.mcpServers.other, { command: 'other-server' }, 'other entries are kept');
    const entry = config.mcpServers.parley;
    assert.equal(entry?.type, 'stdio');
    assert.equal(entry?.command, process.execPath);
    assert.match(entry?.args[0] ?? '', /services\/mcp\/bin\/parley-mcp\.js$/);
    assert.deepEqual(entry?.args.slice(1), [
      '--creds',
      r.creds,
      '--server',
      parley.natsUrl,
      '--runtime',
      'claude-code',
      '--session',
      project,
    ]);
    // What Claude Code does next: spawn the configured command and talk MCP to it.
    const bridge = await spawnBridge({
      creds: r.creds,
      server: parley.natsUrl,
      command: { command: entry?.command ?? '', args: entry?.args ?? [] },
    });
    try {
      const me = await bridge.ok<{ id: string; runtime: string }>('whoami');
      const total = (performance.now() - started) / 1000;
      assert.equal(me.id, r.agent);
      assert.equal(me.runtime, 'claude-code', 'the card says which runtime');
      console.log(
        `parley connect took ${r.seconds.toFixed(2)} s; from nothing to a connected session (whoami answered): ${total.toFixed(2)} s`,
      );
    } finally {
      await bridge.close();
    }
  });

  it('is idempotent: the same agent and creds, the config left as it was', async () => {
    const path = join(project, '.mcp.json');
    const before = await readFile(path, 'utf8');
    const first = await connect('claude-code', 'coder');
    const creds = await readFile(first.creds, 'utf8');
    const again = await connect('claude-code', 'coder');
    assert.equal(again.agentChange, 'reused');
    assert.equal(again.agent, first.agent);
    assert.equal(again.configChange, 'unchanged');
    assert.equal(await readFile(path, 'utf8'), before);
    assert.equal(await readFile(again.creds, 'utf8'), creds, 'creds are not reissued');
  });

  it('codex: an entry in ~/.codex/config.toml (or $CODEX_HOME), keeping the rest of the file', async () => {
    const codexDir = join(home, '.codex');
    await mkdir(codexDir, { recursive: true });
    const original = 'model = "o3"\n\n[mcp_servers.other]\ncommand = "other"\n';
    await writeFile(join(codexDir, 'config.toml'), original);
    const r = await connect('codex', 'reviewer');
    assert.equal(r.config, join(codexDir, 'config.toml'));
    const text = await readFile(r.config, 'utf8');
    assert.ok(text.startsWith(original), text);
    assert.match(
      text,
      /\n\[mcp_servers\.parley\]\ncommand = ".+"\nargs = \[".+parley-mcp\.js", "--creds", ".+\.creds", "--server", "nats:\/\/127\.0\.0\.1:\d+", "--runtime", "codex", "--session", "default"\]\ntool_timeout_sec = 660\n$/,
    );
    assert.equal((await connect('codex', 'reviewer')).configChange, 'unchanged');
    assert.equal(await readFile(r.config, 'utf8'), text);
    const elsewhere = join(dir, 'codex-home');
    const moved = await connect('codex', 'reviewer', { CODEX_HOME: elsewhere });
    assert.equal(moved.config, join(elsewhere, 'config.toml'));
    assert.equal(moved.configChange, 'created');
  });

  it('cursor: .cursor/mcp.json in the project', async () => {
    const r = await connect('cursor', 'pair');
    assert.equal(r.config, join(project, '.cursor', 'mcp.json'));
    assert.equal(r.configChange, 'created');
    const config = JSON.parse(await readFile(r.config, 'utf8')) as {
      mcpServers: Record<string, { command: string; args: string[] }>;
    };
    assert.equal(config.mcpServers.parley?.command, process.execPath);
    assert.ok(config.mcpServers.parley?.args.includes('cursor'));
  });

  it('refuses an unknown client and changes nothing', async () => {
    const err: string[] = [];
    const code = await runCli(
      ['connect', 'vim', '--name', 'x', '--as', graceCreds, '--server', parley.natsUrl],
      {
        out: () => undefined,
        err: (l) => err.push(l),
      },
      { HOME: home },
    );
    assert.equal(code, 1);
    assert.match(err.join('\n'), /claude-code, codex, cursor/);
  });
});
