/**
 * How a service process stops on SIGTERM (`runServiceProcess`): within PARLEY_STOP_TIMEOUT_MS,
 * whatever hangs — exit 0 when everything stopped, exit 1 with an error log naming the step that did
 * not. Real processes, a real nats-server, a real HTTP client.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { request } from 'node:http';
import { resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freePort, startServer, type TestServer, waitFor, within } from '@parley/test/harness';

const fixture = resolve(import.meta.dirname, 'fixtures/stop-service.ts');

interface Running {
  child: ChildProcess;
  port: number;
  out: () => string;
  exited: Promise<number | null>;
}

async function startStopper(nats: TestServer, env: Record<string, string> = {}): Promise<Running> {
  const port = await freePort();
  const child = spawn(process.execPath, [fixture], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      NATS_URL: nats.url,
      HTTP_HOST: '127.0.0.1',
      HTTP_PORT: String(port),
      LOG_LEVEL: 'info',
      PARLEY_STOP_TIMEOUT_MS: '2000',
      ...env,
    },
  });
  let out = '';
  child.stdout?.on('data', (d) => {
    out += d;
  });
  child.stderr?.on('data', (d) => {
    out += d;
  });
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  await waitFor(
    async () => (await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => undefined))?.status === 200,
    () => `the stopper to become healthy (output so far:\n${out})`,
    60_000,
  );
  return { child, port, out: () => out, exited };
}

/** The exit code, or a failure naming what the process printed if it is still running after `ms`. */
async function exitWithin(p: Running, ms: number): Promise<number | null> {
  const code = await within(p.exited, ms, 'running' as const);
  assert.notEqual(code, 'running', `still running ${ms} ms after SIGTERM; output:\n${p.out()}`);
  return code as number | null;
}

/** The log lines of a pino JSON log, parsed. */
function logLines(out: string): { level: number; msg: string; abandoned?: string[]; notRun?: string[] }[] {
  return out
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l));
}

describe('a service process stopping on SIGTERM', () => {
  let nats: TestServer;
  const children: ChildProcess[] = [];
  before(async () => {
    nats = await startServer();
  });
  after(async () => {
    for (const c of children) c.kill('SIGKILL');
    await nats?.stop();
  });

  it('exits 0 once its service, connections and telemetry stopped', async () => {
    const p = await startStopper(nats);
    children.push(p.child);
    p.child.kill('SIGTERM');
    assert.equal(await exitWithin(p, 20_000), 0, p.out());
    assert.ok(
      logLines(p.out()).some((l) => l.msg === 'stopped'),
      p.out(),
    );
  });

  it('cuts off an HTTP client that holds a response open, and still exits 0', async () => {
    // Time for the 2 s the HTTP step gives a client to finish.
    const p = await startStopper(nats, { PARLEY_STOP_TIMEOUT_MS: '10000' });
    children.push(p.child);
    // A client reading an event stream that never ends (as an MCP session's GET does).
    const held = new Promise<string>((res) => {
      request(`http://127.0.0.1:${p.port}/slow`, (r) => {
        r.once('data', () => p.child.kill('SIGTERM'));
        r.on('close', () => res('closed by the server'));
        r.resume();
      })
        .on('error', (err) => res(`error: ${err.message}`))
        .end();
    });
    assert.equal(await exitWithin(p, 20_000), 0, p.out());
    assert.equal(await held, 'closed by the server');
  });

  it('gives up on a service whose stop hangs: exits 1 within PARLEY_STOP_TIMEOUT_MS, naming it', async () => {
    const p = await startStopper(nats, { STOP_HANGS: 'service' });
    children.push(p.child);
    const t0 = performance.now();
    p.child.kill('SIGTERM');
    assert.equal(await exitWithin(p, 20_000), 1, p.out());
    const ms = performance.now() - t0;
    // 2 s of deadline, then closing connections and exiting (no more than a few hundred ms idle).
    assert.ok(ms >= 2_000 && ms < 10_000, `exited after ${ms} ms`);
    const error = logLines(p.out()).find((l) => l.level === 50);
    assert.deepEqual(error?.abandoned, ['the stopper service'], p.out());
    // Past the deadline the connections are closed, not drained, and telemetry is not flushed.
    assert.deepEqual(error?.notRun, ['the NATS connections', 'telemetry'], p.out());
    assert.match(error?.msg ?? '', /did not stop within 2000 ms: gave up on the stopper service; not run: /);
  });
});
