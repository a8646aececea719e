/**
 * The MCP configuration of Claude Code (`.mcp.json` in the project), Cursor (`.cursor/mcp.json` in
 * the project) and Codex (`config.toml` in `$CODEX_HOME`, by default `~/.codex`): adding or
 * replacing one server entry while keeping everything else in the file as it was.
 */
import { join } from 'node:path';

/** The clients `parley connect` configures. */
export const CLIENTS = ['claude-code', 'codex', 'cursor'] as const;
export type Client = (typeof CLIENTS)[number];

/** An MCP server entry: a command to spawn (stdio), or an HTTP endpoint with a bearer token. */
export type ServerEntry =
  | { transport: 'stdio'; command: string; args: string[] }
  | { transport: 'http'; url: string; token: string };

/** What a change did to a file. */
export type Change = 'created' | 'added' | 'updated' | 'unchanged';

/** Where a client's MCP configuration lives. */
export function configPath(
  client: Client,
  o: { dir: string; env: Record<string, string | undefined> },
): string {
  if (client === 'claude-code') return join(o.dir, '.mcp.json');
  if (client === 'cursor') return join(o.dir, '.cursor', 'mcp.json');
  const codexHome = o.env.CODEX_HOME || join(o.env.HOME ?? '', '.codex');
  return join(codexHome, 'config.toml');
}

function jsonEntry(client: Client, e: ServerEntry): Record<string, unknown> {
  if (e.transport === 'stdio') {
    return client === 'claude-code'
      ? { type: 'stdio', command: e.command, args: e.args }
      : { command: e.command, args: e.args };
  }
  const headers = { Authorization: `Bearer ${e.token}` };
  return client === 'claude-code' ? { type: 'http', url: e.url, headers } : { url: e.url, headers };
}

/** Sets `mcpServers[name]` in a JSON config (Claude Code, Cursor). */
export function applyJsonConfig(
  client: Exclude<Client, 'codex'>,
  current: string | undefined,
  name: string,
  entry: ServerEntry,
): { text: string; change: Change } {
  let doc: Record<string, unknown> = {};
  if (current !== undefined && current.trim() !== '') {
    const parsed: unknown = JSON.parse(current);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      throw new Error('the existing MCP configuration is not a JSON object');
    }
    doc = parsed as Record<string, unknown>;
  }
  const servers = { ...((doc.mcpServers as Record<string, unknown> | undefined) ?? {}) };
  const next = jsonEntry(client, entry);
  const before = servers[name];
  const change: Change =
    current === undefined
      ? 'created'
      : before === undefined
        ? 'added'
        : JSON.stringify(before) === JSON.stringify(next)
          ? 'unchanged'
          : 'updated';
  if (change === 'unchanged' && current !== undefined) return { text: current, change };
  servers[name] = next;
  return { text: `${JSON.stringify({ ...doc, mcpServers: servers }, null, 2)}\n`, change };
}

/** TOML basic string (JSON's escapes are valid TOML for the characters that need escaping). */
const tomlString = (s: string) => JSON.stringify(s);

function codexBlock(name: string, e: ServerEntry): string {
  const head = `[mcp_servers.${name}]`;
  if (e.transport === 'stdio') {
    return [
      head,
      `command = ${tomlString(e.command)}`,
      `args = [${e.args.map(tomlString).join(', ')}]`,
      // wait_for_messages may wait for minutes: Codex's default tool timeout is 60 s.
      'tool_timeout_sec = 660',
      '',
    ].join('\n');
  }
  return [
    head,
    `url = ${tomlString(e.url)}`,
    `http_headers = { Authorization = ${tomlString(`Bearer ${e.token}`)} }`,
    'tool_timeout_sec = 660',
    '',
  ].join('\n');
}

/**
 * Sets the `[mcp_servers.<name>]` table (and its sub-tables) in Codex's `config.toml`, leaving every
 * other line as it was.
 */
export function applyCodexToml(
  current: string | undefined,
  name: string,
  entry: ServerEntry,
): { text: string; change: Change } {
  if (!/^[A-Za-z0-9_-]+$/.test(name)) throw new Error(`${name} is not a bare TOML key`);
  const block = codexBlock(name, entry);
  if (current === undefined) return { text: block, change: 'created' };
  const lines = current.split('\n');
  const ours = (line: string) => {
    const m = /^\s*\[\s*([^\]]+?)\s*\]\s*(#.*)?$/.exec(line);
    return m ? m[1] === `mcp_servers.${name}` || m[1]?.startsWith(`mcp_servers.${name}.`) : undefined;
  };
  const out: string[] = [];
  let existing: string[] | undefined;
  let inOurs = false;
  for (const line of lines) {
    const header = ours(line);
    if (header !== undefined) inOurs = header;
    if (!inOurs) out.push(line);
    else {
      existing ??= [];
      existing.push(line);
    }
  }
  if (existing === undefined) {
    const base = current.length === 0 || current.endsWith('\n') ? current : `${current}\n`;
    return { text: `${base}${base.trim() ? '\n' : ''}${block}`, change: 'added' };
  }
  if (existing.join('\n').trim() === block.trim()) return { text: current, change: 'unchanged' };
  const kept = out.join('\n').replace(/\n*$/, '\n');
  return { text: `${kept.trim() ? `${kept}\n` : ''}${block}`, change: 'updated' };
}
