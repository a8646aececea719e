import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import { connect, createInbox, credsAuthenticator } from '@nats-io/transport-node';
import { registryApi, request } from '@parley/contracts';
import { mintServiceCreds } from '@parley/keys';
import { silentLogger } from '@parley/kit';
import { runCli } from '@parley/sdk/cli';
import { freePort, StartupError, startStandalone } from '@parley/standalone';
import { startOtlpReceiver, waitFor } from '@parley/test/harness';

const enc = new TextEncoder();
const homes: string[] = [];
after(async () => {
  for (const h of homes) await rm(h, { recursive: true, force: true });
});
async function tempHome() {
  const h = await mkdtemp(join(tmpdir(), 'parley-home-'));
  homes.push(h);
  return h;
}

// A spawned start compiles the sources with tsx first: on a loaded 2-core machine that alone can
// take tens of seconds. A bound on how long to wait, not a speed assertion.
const START_MS = 120_000;

describe('standalone backbone', () => {
  it('starts in operator mode, reports healthy, serves the admin, and reuses its keys on the next start', async () => {
    const home = await tempHome();
    const opts = { home, natsPort: await freePort(), httpPort: await freePort(), log: silentLogger() };
    const first = await startStandalone(opts);
    let keysBefore: string;
    try {
      const health = await fetch(`${first.httpUrl}/healthz`);
      assert.equal(health.status, 200);
      assert.deepEqual(((await health.json()) as { checks: unknown }).checks, {
        nats: true,
        registry: true,
        governance: true,
        rooms: true,
        consent: true,
        mcp: true,
        // Every fan-out partition with entries waiting has a live holder.
        fanout: true,
        gateway: true,
      });
      assert.equal((await fetch(`${first.httpUrl}/readyz`)).status, 200);

      // Operator mode: no anonymous connections.
      await assert.rejects(connect({ servers: first.natsUrl, reconnect: false }));

      const adminCreds = await readFile(first.home.paths.adminCreds);
      const admin = await connect({
        servers: first.natsUrl,
        authenticator: credsAuthenticator(adminCreds),
        inboxPrefix: `_INBOX.${first.home.state.admin.id}`,
      });
      const me = await request(admin, first.home.state.admin.id, registryApi.whoami, {});
      assert.equal(me.kind, 'human');
      assert.equal(me.superadmin, true);
      assert.equal(me.org, first.home.state.org.id);
      await admin.close();

      // Each service is discoverable through the NATS services protocol.
      const svc = await connect({
        servers: first.natsUrl,
        authenticator: credsAuthenticator(
          enc.encode((await mintServiceCreds(first.home.keys, 'test')).creds),
        ),
      });
      const names = new Set<string>();
      const sub = svc.subscribe(createInbox());
      svc.publish('$SRV.PING', undefined, { reply: sub.getSubject() });
      for await (const m of sub) {
        names.add(m.json<{ name: string }>().name);
        if (names.size === 7) break;
      }
      assert.deepEqual([...names].sort(), [
        'parley-consent',
        'parley-gateway',
        'parley-gateway-a2a',
        'parley-governance',
        'parley-mcp',
        'parley-registry',
        'parley-rooms',
      ]);
      await svc.close();
      keysBefore = await readFile(first.home.paths.keys, 'utf8');
    } finally {
      await first.stop();
    }
    assert.equal((await fetch(`${first.httpUrl}/healthz`).catch(() => undefined))?.status, undefined);

    const second = await startStandalone({ ...opts, natsPort: await freePort() });
    try {
      assert.equal(second.home.firstRun, false);
      assert.equal(await readFile(second.home.paths.keys, 'utf8'), keysBefore);
      // The admin creds written by the first start still work.
      const admin = await connect({
        servers: second.natsUrl,
        authenticator: credsAuthenticator(await readFile(second.home.paths.adminCreds)),
        inboxPrefix: `_INBOX.${second.home.state.admin.id}`,
      });
      const me = await request(admin, second.home.state.admin.id, registryApi.whoami, {});
      assert.equal(me.id, second.home.state.admin.id);
      await admin.close();
    } finally {
      await second.stop();
    }
  });

  it('refuses a port in use with an error naming the flag, and leaves nothing running', async () => {
    const blocker = createServer();
    const port = await freePort();
    await new Promise<void>((r) => blocker.listen(port, '127.0.0.1', () => r()));
    try {
      const home = await tempHome();
      const err = await startStandalone({
        home,
        natsPort: port,
        httpPort: await freePort(),
        log: silentLogger(),
      }).catch((e: unknown) => e);
      assert.ok(err instanceof StartupError);
      assert.match(err.message, new RegExp(`port ${port} .*in use.*--nats-port`));
      const err2 = await startStandalone({
        home,
        natsPort: await freePort(),
        httpPort: port,
        log: silentLogger(),
      }).catch((e: unknown) => e);
      assert.ok(err2 instanceof StartupError);
      assert.match(err2.message, /--http-port/);
    } finally {
      blocker.close();
    }
  });
});

describe('the npm start entry point', () => {
  it('prints what runs and where, runs the demo conversation, and on SIGTERM stops nats-server and exits 0', async () => {
    const home = await tempHome();
    const natsPort = await freePort();
    const httpPort = await freePort();
    const root = resolve(import.meta.dirname, '../../..');
    const child = spawn(
      process.execPath,
      [
        'services/standalone/src/main.ts',
        '--home',
        home,
        '--nats-port',
        String(natsPort),
        '--http-port',
        String(httpPort),
        '--nats-ws-port',
        String(await freePort()),
      ],
      { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LOG_LEVEL: 'error' } },
    );
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.stderr.on('data', (d) => {
      out += d;
    });
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    try {
      // The whole banner (it may arrive in more than one chunk): its last line.
      await waitFor(() => out.includes('Ctrl-C stops everything'), 'the banner', START_MS);
      assert.match(out, new RegExp(`nats://127\\.0\\.0\\.1:${natsPort}`));
      assert.match(out, /admin creds\s+\S*admin\.creds/);
      assert.equal((await fetch(`http://127.0.0.1:${httpPort}/healthz`)).status, 200);
      // The demo: planner and reviewer exchange a review, and the admin (a member) can tail it.
      await waitFor(() => out.includes('demo  planner → room: Thanks'), 'the demo conversation', START_MS);
      assert.match(out, /demo {2}reviewer → planner: Review:/);
      // Consent: an agent of another owner finds the reviewer, is refused, asks, is accepted, joins.
      await waitFor(() => out.includes('demo  auditor → room:'), 'the consent step', START_MS);
      assert.match(
        out,
        /demo {2}auditor \(agt_\w+, owned by usr_\w+\) finds reviewer \(agt_\w+\) by skill code-review/,
      );
      assert.match(out, /demo {2}auditor → direct room with the reviewer: refused, NO_CONSENT/);
      assert.match(out, /demo {2}auditor → reviewer: contact request creq_\w+ “/);
      assert.match(out, /demo {2}reviewer accepts creq_\w+: the auditor and the reviewer are contacts/);
      assert.match(out, /demo {2}reviewer invites the auditor into room_\w+/);
      // Tasks: a held call approved through the CLI, then a failure that travels back to the admin.
      await waitFor(() => out.includes('demo  planner fails task_'), 'the task step', 30_000);
      assert.match(out, /tc_\w+ {2}approved {2}agt_\w+ → deploy\.canary \(deploy:canary\)/);
      assert.match(out, /demo {2}reviewer rolls back billing-v2-canary-1 \(compensation\)/);
      assert.match(
        out,
        /demo {2}planner is told: task task_\w+ failed \(“canary error rate 4% is over the 1% threshold”\), path task_\w+ → task_\w+/,
      );
      const lines: string[] = [];
      const code = await runCli(
        [
          'tail',
          '--count',
          '6',
          '--server',
          `nats://127.0.0.1:${natsPort}`,
          '--as',
          join(home, 'creds', 'admin.creds'),
        ],
        { out: (l) => lines.push(l), err: (l) => lines.push(l) },
      );
      assert.equal(code, 0, lines.join('\n'));
      assert.match(lines[0] ?? '', /· usr_\w+ joined \(member\)$/);
      assert.match(lines[1] ?? '', /: Plan: /);
      assert.match(lines[2] ?? '', /\(handoff\): Review: /);
      assert.match(lines[3] ?? '', /: Thanks /);
      assert.match(lines[4] ?? '', /agt_\w+ · agt_\w+ joined \(member\)$/);
      assert.match(lines[5] ?? '', /agt_\w+: Auditor here: /);
      const pidLine = await readFile(join(home, 'nats', 'nats-server.log'), 'utf8');
      const natsPid = Number(pidLine.match(/\[(\d+)\]/)?.[1]);
      assert.ok(natsPid > 0);
      child.kill('SIGTERM');
      assert.equal(await exited, 0);
      assert.match(out, /stopped\./);
      assert.throws(() => process.kill(natsPid, 0), /ESRCH/, 'nats-server is still running');
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });
});

describe('the npm start entry point with OTEL_EXPORTER_OTLP_ENDPOINT set', () => {
  it('exports the demo conversation as one trace across the agents and the services', async () => {
    const receiver = await startOtlpReceiver();
    const home = await tempHome();
    const root = resolve(import.meta.dirname, '../../..');
    const child = spawn(
      process.execPath,
      [
        'services/standalone/src/main.ts',
        '--home',
        home,
        '--nats-port',
        String(await freePort()),
        '--http-port',
        String(await freePort()),
        '--nats-ws-port',
        String(await freePort()),
      ],
      {
        cwd: root,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, LOG_LEVEL: 'error', OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url },
      },
    );
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    try {
      await waitFor(() => out.includes('demo  planner → room: Thanks'), 'the demo conversation', START_MS);
      child.kill('SIGTERM');
      assert.equal(await exited, 0);
      const spans = await receiver.waitForSpans(
        (all) =>
          all.some((s) => s.service === 'parley-planner') && all.some((s) => s.service === 'parley-reviewer'),
        { what: 'the demo agents’ spans' },
      );
      const plan = spans.find(
        (s) => s.service === 'parley-planner' && s.name === 'send room' && s.parentSpanId === undefined,
      );
      assert.ok(plan, 'the plan starts a trace');
      const trace = spans.filter((s) => s.traceId === plan.traceId);
      const services = new Set(trace.map((s) => s.service));
      for (const s of ['parley-planner', 'parley-reviewer', 'parley-rooms'])
        assert.ok(services.has(s), `${s} in the trace`);
      // The review and the thanks are both in it: three sends in one trace.
      assert.equal(trace.filter((s) => s.name === 'send room').length, 3);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
      await receiver.close();
    }
  });
});
