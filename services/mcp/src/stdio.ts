/**
 * `parley mcp`: an MCP server over stdio acting as the agent of a creds file. Runs until the client
 * closes stdin (or SIGTERM/SIGINT), then gives back what it held unreturned and disconnects.
 */
import type { Readable, Writable } from 'node:stream';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { connect } from '@parley/sdk';
import { openRuntime } from './runtime.js';
import { createBridgeServer } from './server.js';
import type { WaitLimits } from './tools.js';

/** Options of {@link runStdioServer}. */
export interface StdioServerOptions {
  /** The agent's creds file (or its contents). */
  creds: string;
  /** NATS server URL(s). @default nats://127.0.0.1:4222 */
  servers?: string | string[];
  /** The binding's runtime name, e.g. `claude-code`. @default mcp */
  runtime?: string;
  /**
   * The binding's session key: a restarted server with the same key resumes the same binding.
   * @default default
   */
  session?: string;
  /** @default process.stdin */
  stdin?: Readable;
  /** @default process.stdout (nothing else may write to it) */
  stdout?: Writable;
  /** Diagnostics (never stdout). @default a line on stderr */
  log?: (line: string) => void;
  limits?: Partial<WaitLimits>;
  /** Shorthand for `limits.progressIntervalMs`. */
  progressIntervalMs?: number;
  /** Handle SIGTERM/SIGINT by closing gracefully. @default true */
  handleSignals?: boolean;
}

/** Runs the stdio MCP server; resolves when the session is over and everything is closed. */
export async function runStdioServer(o: StdioServerOptions): Promise<void> {
  const log = o.log ?? ((line: string) => process.stderr.write(`parley-mcp: ${line}\n`));
  const stdin = o.stdin ?? process.stdin;
  const runtime = await openRuntime({
    agent: (delivery) =>
      connect({ creds: o.creds, ...(o.servers ? { servers: o.servers } : {}), name: 'parley-mcp', delivery }),
    key: { runtime: o.runtime ?? 'mcp', externalId: o.session ?? 'default' },
    onError: (err) => log(`delivery: ${(err as Error)?.message ?? err}`),
  });
  const bridge = createBridgeServer({
    runtime,
    limits: { ...o.limits, ...(o.progressIntervalMs ? { progressIntervalMs: o.progressIntervalMs } : {}) },
    onError: (err, where) => log(`${where}: ${(err as Error)?.stack ?? err}`),
  });
  let done!: () => void;
  const finished = new Promise<void>((resolve) => {
    done = resolve;
  });
  const transport = new StdioServerTransport(stdin, o.stdout ?? process.stdout);
  transport.onclose = () => done();
  stdin.once('end', () => done());
  const signals = o.handleSignals ?? true;
  const onSignal = () => done();
  if (signals) {
    process.once('SIGTERM', onSignal);
    process.once('SIGINT', onSignal);
  }
  await bridge.connect(transport);
  log(`serving ${runtime.me.name ?? runtime.me.id} (${runtime.me.id}) over stdio`);
  await finished;
  if (signals) {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  }
  await bridge.close();
  await runtime.close();
}
