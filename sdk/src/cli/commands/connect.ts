import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import {
  type AgentCardInput,
  type Agent as AgentRecord,
  governanceApi,
  mcpApi,
  ParleyError,
  registryApi,
  type UserId,
} from '@parley/contracts';
import { Argument, type Command, Option } from 'commander';
import { connect } from '../../agent.js';
import { readCreds } from '../../connect.js';
import {
  applyCodexToml,
  applyJsonConfig,
  type Change,
  CLIENTS,
  type Client,
  configPath,
  type ServerEntry,
} from '../client-config.js';
import type { CliContext } from '../context.js';
import { findMcpPackage } from '../mcp-package.js';

interface ConnectOptions {
  name: string;
  owner?: string;
  dir: string;
  credsOut?: string;
  serverName: string;
  skill?: string[];
  transport: 'stdio' | 'http';
  url?: string;
}

const runtimeNames: Record<Client, string> = {
  'claude-code': 'Claude Code',
  codex: 'Codex',
  cursor: 'Cursor',
};

/** A sensible card for a coding session of that client. */
function cardFor(client: Client, name: string, skills: string[] | undefined): AgentCardInput {
  const ids = skills?.length ? skills : ['coding', 'code.review'];
  return {
    name,
    description: `A ${runtimeNames[client]} coding session, connected to Parley through MCP: writes and reviews code, takes handoffs.`,
    runtime: client,
    visibility: 'org',
    skills: ids.map((id) => ({ id, name: id, tags: [client, 'mcp'] })),
    capabilities: { streaming: false, pushNotifications: false },
  };
}

async function findAgent(
  list: (cursor?: string) => Promise<{ agents: { agent: AgentRecord }[]; next?: string | undefined }>,
  name: string,
): Promise<AgentRecord | undefined> {
  let cursor: string | undefined;
  do {
    const page = await list(cursor);
    const hit = page.agents.find((l) => l.agent.card.name.toLowerCase() === name.toLowerCase());
    if (hit) return hit.agent;
    cursor = page.next;
  } while (cursor);
  return undefined;
}

async function writeChanged(path: string, text: string, change: Change, mode?: number): Promise<void> {
  if (change === 'unchanged') return;
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, text, mode ? { mode } : {});
  if (mode) await chmod(path, mode);
}

/** `parley connect claude-code|codex|cursor`: one command from nothing to a connected session. */
export function registerConnectCommands(program: Command, ctx: CliContext): void {
  program
    .command('connect')
    .description(
      'connect a Claude Code, Codex or Cursor session to Parley: create (or reuse) its agent, write its creds, and write the client’s MCP configuration',
    )
    .addArgument(new Argument('<client>', 'claude-code | codex | cursor').choices(CLIENTS))
    .requiredOption(
      '--name <agent>',
      'the agent’s name (reused when the owner already has an agent of that name)',
    )
    .option('--owner <usrId>', 'the human who owns it (default: you)')
    .option('--dir <path>', 'the project directory (Claude Code and Cursor configs live there)', '.')
    .option(
      '--creds-out <file>',
      'where the agent’s creds go (default: ~/.parley/agents/<agentId>.creds, 0600)',
    )
    .option('--server-name <name>', 'the entry’s name in the client configuration', 'parley')
    .option('--skill <id...>', 'skill ids on the agent’s card (default: coding, code.review)')
    .addOption(
      new Option('--transport <t>', 'how the client reaches Parley')
        .choices(['stdio', 'http'])
        .default('stdio'),
    )
    .option('--url <url>', 'with --transport http: the /mcp endpoint (e.g. http://127.0.0.1:7420/mcp)')
    .action(async (client: Client, o: ConnectOptions, cmd: Command) => {
      const started = performance.now();
      if (o.transport === 'http' && !o.url)
        throw new Error('--transport http needs --url <http://host:port/mcp>');
      const dir = resolve(o.dir);
      const home = ctx.env.HOME || homedir();
      const done: string[] = [];
      const undo: string[] = [];
      const result = await ctx.withAgent(cmd, async (caller, g) => {
        const me = await caller.whoami();
        const owner = (o.owner ?? (me.kind === 'human' ? me.id : undefined)) as UserId | undefined;
        if (!owner)
          throw new ParleyError('INVALID_ARGUMENT', '--owner <usrId> is required when acting as an agent');
        let agent = await findAgent(
          (cursor) =>
            caller.call(registryApi.listAgents, { owner, limit: 200, ...(cursor ? { cursor } : {}) }),
          o.name,
        );
        let creds: string | undefined;
        let agentChange: 'created' | 'reused' = 'reused';
        if (!agent) {
          const r = await caller.call(registryApi.createAgent, {
            owner,
            card: cardFor(client, o.name, o.skill),
          });
          agent = r.agent;
          creds = r.credentials.creds;
          agentChange = 'created';
          done.push(`created agent ${agent.id} “${o.name}” (${client}, owner ${owner})`);
          undo.push(`npx parley agent deregister ${agent.id}`);
        } else {
          done.push(`reused agent ${agent.id} “${agent.card.name}” (owner ${agent.owner})`);
        }
        const credsPath = resolve(o.credsOut ?? join(home, '.parley', 'agents', `${agent.id}.creds`));
        const held = existsSync(credsPath)
          ? await readCreds(credsPath).then(
              (c) => c.id,
              () => undefined,
            )
          : undefined;
        if (!creds && held !== agent.id) {
          // The agent exists but these creds are missing (or another's): new ones; the old stop working.
          creds = (await caller.call(governanceApi.rotateCredentials, { participant: agent.id })).creds;
          done.push(`issued new creds for ${agent.id} (any older creds of it stop working)`);
        }
        if (creds) {
          await mkdir(dirname(credsPath), { recursive: true, mode: 0o700 });
          await writeFile(credsPath, creds, { mode: 0o600 });
          await chmod(credsPath, 0o600);
          done.push(`wrote creds ${credsPath} (0600)`);
          undo.push(`rm ${credsPath}`);
        } else {
          done.push(`kept creds ${credsPath}`);
        }
        // The creds must work before a client is pointed at them.
        const check = await connect({ servers: g.server, creds: credsPath, presence: false });
        await check.whoami().finally(() => check.close());

        let entry: ServerEntry;
        if (o.transport === 'http') {
          const t = await caller.call(mcpApi.createToken, { agent: agent.id, label: `${client} ${dir}` });
          entry = { transport: 'http', url: o.url as string, token: t.token };
          done.push(`minted HTTP token ${t.info.id} for ${agent.id}`);
          undo.push(`npx parley token revoke ${t.info.id}   # the token acts as ${agent.id} until revoked`);
        } else {
          const pkg = findMcpPackage(dir) ?? findMcpPackage();
          if (!pkg) {
            throw new Error(
              'the MCP bridge (@parley/mcp) is not installed here or next to @parley/sdk: npm i @parley/mcp',
            );
          }
          entry = {
            transport: 'stdio',
            command: process.execPath,
            args: [
              pkg.bin,
              '--creds',
              credsPath,
              '--server',
              g.server,
              '--runtime',
              client,
              '--session',
              client === 'codex' ? 'default' : dir,
            ],
          };
        }
        const path = configPath(client, { dir, env: { ...ctx.env, HOME: home } });
        const current = await readFile(path, 'utf8').catch((err: NodeJS.ErrnoException) => {
          if (err.code === 'ENOENT') return undefined;
          throw err;
        });
        const applied =
          client === 'codex'
            ? applyCodexToml(current, o.serverName, entry)
            : applyJsonConfig(client, current, o.serverName, entry);
        // A config holding a bearer token is a secret.
        await writeChanged(
          path,
          applied.text,
          applied.change,
          entry.transport === 'http' ? 0o600 : undefined,
        );
        done.push(
          `${applied.change === 'unchanged' ? 'left' : applied.change} ${path}: MCP server “${o.serverName}”${applied.change === 'unchanged' ? ' (already configured)' : ''}`,
        );
        if (applied.change !== 'unchanged') {
          undo.unshift(
            applied.change === 'created'
              ? `rm ${path}`
              : `remove the “${o.serverName}” entry from ${path}${client === 'codex' ? ` ([mcp_servers.${o.serverName}])` : ' (mcpServers)'}`,
          );
        }
        return {
          client,
          agent: agent.id,
          name: agent.card.name,
          owner: agent.owner,
          agentChange,
          creds: credsPath,
          config: path,
          configChange: applied.change,
          serverName: o.serverName,
          transport: o.transport,
          done,
          undo,
        };
      });
      const seconds = (performance.now() - started) / 1000;
      ctx.print(cmd, { ...result, seconds }, (r) =>
        [
          ...r.done.map((l) => `✓ ${l}`),
          '',
          `${runtimeNames[client]} now starts “${r.serverName}” as ${r.name} (${r.agent}); restart it or run /mcp to connect (${seconds.toFixed(1)} s).`,
          r.undo.length
            ? `To undo:\n${r.undo.map((u) => `  ${u}`).join('\n')}`
            : 'Nothing to undo: nothing changed.',
        ].join('\n'),
      );
    });
}
