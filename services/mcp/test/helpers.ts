/** Spawning `parley mcp` with the official MCP client, and reading tool results. */
import { resolve } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';

export const root = resolve(import.meta.dirname, '../../..');

/** An MCP client connected to a spawned `parley mcp`. */
export interface Bridge {
  client: Client;
  transport: StdioClientTransport;
  /** stderr of the server so far. */
  stderr(): string;
  /** Calls a tool; returns the result (errors included). */
  call(
    name: string,
    args?: Record<string, unknown>,
    options?: { onprogress?: () => void; timeout?: number },
  ): Promise<CallToolResult>;
  /** Calls a tool and returns its structured content, failing on a tool error. */
  ok<T = Record<string, unknown>>(
    name: string,
    args?: Record<string, unknown>,
    options?: { onprogress?: () => void; timeout?: number },
  ): Promise<T>;
  /** SIGKILL: a crash. */
  kill9(): Promise<void>;
  close(): Promise<void>;
}

/** Spawns `parley mcp --creds <creds>` (the CLI's sources, as the tests run everything) and connects to it. */
export async function spawnBridge(o: {
  creds: string;
  server: string;
  runtime?: string;
  session?: string;
  progressIntervalMs?: number;
  command?: { command: string; args: string[] };
}): Promise<Bridge> {
  const command = o.command ?? {
    command: process.execPath,
    args: [
      'sdk/src/cli/run.ts',
      'mcp',
      '--creds',
      o.creds,
      '--server',
      o.server,
      '--runtime',
      o.runtime ?? 'claude-code',
      '--session',
      o.session ?? 'test',
      ...(o.progressIntervalMs ? ['--progress-interval', String(o.progressIntervalMs)] : []),
    ],
  };
  const transport = new StdioClientTransport({
    ...command,
    cwd: root,
    env: { ...process.env } as Record<string, string>,
    stderr: 'pipe',
  });
  let err = '';
  transport.stderr?.on('data', (d) => {
    err += d;
  });
  const client = new Client({ name: 'parley-test', version: '1.0.0' });
  try {
    await client.connect(transport);
  } catch (e) {
    throw new Error(`parley mcp did not start: ${(e as Error).message}\n${err}`);
  }
  const call: Bridge['call'] = async (name, args = {}, options = {}) =>
    (await client.callTool({ name, arguments: args }, undefined, {
      timeout: options.timeout ?? 30_000,
      ...(options.onprogress ? { onprogress: options.onprogress, resetTimeoutOnProgress: true } : {}),
    })) as CallToolResult;
  return {
    client,
    transport,
    stderr: () => err,
    call,
    async ok(name, args, options) {
      const r = await call(name, args, options);
      if (r.isError) throw new Error(`${name} failed: ${JSON.stringify(r.content)}`);
      return r.structuredContent as never;
    },
    async kill9() {
      const pid = transport.pid;
      if (pid) process.kill(pid, 'SIGKILL');
      await client.close().catch(() => undefined);
    },
    close: () => client.close(),
  };
}

/** The text of a tool result. */
export function textOf(r: CallToolResult): string {
  return r.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');
}

/** A message as wait_for_messages returns it (the fields the tests read). */
export interface Returned {
  room: string;
  seq: number;
  id: string;
  event: string;
  kind: string;
  text: string;
  trusted: boolean;
  from: { id: string };
  handoff?: { goal: string; openQuestions: string[] };
  redelivered?: boolean;
  replyTo?: string;
}
