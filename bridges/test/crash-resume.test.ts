/**
 * Crash-resume: the Salesforce bridge runs as its own process (`parley-bridge`), is killed -9
 * twice in the middle of a stream of change events, and restarted on the same state directory.
 * Every event ends up in the room exactly once, in the source's order — with the bridge's own
 * cursor (Subscribe), and with a managed subscription whose position Salesforce keeps
 * (ManagedSubscribe, a commit after each stored batch).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { Delivery } from '@parley/sdk';
import { freePort, startParley, type TestParley, waitFor } from '@parley/test/harness';
import { type LocalSalesforce, startLocalSalesforce } from '../src/local/salesforce-server.js';
import { createWorld, historyOf } from './helpers.js';

const MAIN = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'main.ts');
const EVENTS = 1500;

describe('bridge crash-resume', () => {
  let parley: TestParley;
  const systems: LocalSalesforce[] = [];
  let world: Awaited<ReturnType<typeof createWorld>>;
  const dirs: string[] = [];
  const procs: ChildProcess[] = [];

  before(async () => {
    parley = await startParley();
    world = await createWorld(parley);
  });
  after(async () => {
    for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    await world?.close();
    await Promise.allSettled(systems.map((sf) => sf.stop()));
    await parley?.destroy();
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  it('killed -9 twice mid-stream and restarted: every event stored once, in order', (t) =>
    crashResume(t, false));

  it('the same with a managed subscription (ManagedSubscribe): Salesforce keeps the committed position', (t) =>
    crashResume(t, true));

  async function crashResume(t: TestContext, managed: boolean): Promise<void> {
    // Each run its own Salesforce (its own change log), state directory and people.
    const sf = await startLocalSalesforce();
    systems.push(sf);
    const dir = await mkdtemp(join(tmpdir(), 'parley-bridge-crash-'));
    dirs.push(dir);
    if (managed)
      sf.createManagedSubscription('Crash_Accounts', '/data/AccountChangeEvent', {
        replayPreset: 'EARLIEST',
      });
    const kind = managed ? 'managed' : 'topic';
    const ops = await world.person(`ops-${kind}`);
    const alice = await world.person(`alice-${kind}`);
    const b = await world.bridgeAgent(ops, `salesforce-${kind}`, []);
    const room = (await ops.agent.rooms.create('crash', { members: [b.id, alice.id] })).id;
    const seen: string[] = [];
    alice.agent.on('message', (d: Delivery) => {
      const id = d.message.metadata?.['source-id'];
      if (id) seen.push(id);
    });
    await alice.agent.listening;
    await writeFile(join(dir, 'bridge.creds'), b.creds, { mode: 0o600 });
    await writeFile(
      join(dir, 'mapping.yaml'),
      `bridge: salesforce\ninbound:\n  - type: /data/AccountChangeEvent*\n    to: { room: ${room} }\n    text: "{{payload.Name}}"\n    data: false\n`,
    );
    const emitted: string[] = [];
    let lastReplayId = '';
    for (let i = 0; i < EVENTS; i++) {
      const e = sf.emitChange('Account', { recordIds: [`001C${i}`], fields: { Name: `n${i}` } });
      emitted.push(e.id);
      lastReplayId = e.replayId;
    }
    const ports: number[] = [];
    const start = async () => {
      const port = await freePort();
      ports.push(port);
      const proc = spawn(process.execPath, ['--conditions=@parley/source', '--import', 'tsx', MAIN], {
        env: {
          ...process.env,
          PARLEY_BRIDGE: 'salesforce',
          NATS_URL: parley.natsUrl,
          NATS_CREDS: join(dir, 'bridge.creds'),
          PARLEY_BRIDGE_MAPPING: join(dir, 'mapping.yaml'),
          PARLEY_BRIDGE_STATE_DIR: join(dir, 'state'),
          HTTP_HOST: '127.0.0.1',
          HTTP_PORT: String(port),
          LOG_LEVEL: 'warn',
          SALESFORCE_LOGIN_URL: sf.loginUrl,
          SALESFORCE_CLIENT_ID: sf.clientId,
          SALESFORCE_CLIENT_SECRET: sf.clientSecret,
          SALESFORCE_PUBSUB_ENDPOINT: sf.endpoint,
          SALESFORCE_PUBSUB_INSECURE: 'true',
          ...(managed
            ? { SALESFORCE_MANAGED_SUBSCRIPTIONS: 'Crash_Accounts=/data/AccountChangeEvent' }
            : { SALESFORCE_TOPICS: '/data/AccountChangeEvent' }),
          SALESFORCE_START_AT: 'EARLIEST',
          SALESFORCE_BATCH: '50',
          OTEL_SDK_DISABLED: 'true',
        },
        stdio: ['ignore', 'ignore', 'inherit'],
      });
      procs.push(proc);
      return proc;
    };
    // What the running process counted (its /metrics), read just before it is killed.
    const counted = async () => {
      const text = await (await fetch(`http://127.0.0.1:${ports[ports.length - 1]}/metrics`)).text();
      const n = (outcome: string) =>
        Number(
          new RegExp(`parley_bridge_events_total\\{[^}]*outcome="${outcome}"[^}]*\\} (\\d+)`).exec(
            text,
          )?.[1] ?? 0,
        );
      return { stored: n('stored'), duplicate: n('duplicate') };
    };
    const kill9 = async (p: ChildProcess) => {
      const exited = new Promise((r) => p.once('exit', r));
      p.kill('SIGKILL');
      await exited;
    };
    const killedAt: number[] = [];
    const runs: { stored: number; duplicate: number }[] = [];
    const began = Date.now();
    let p = await start();
    await waitFor(
      () => seen.length >= 300,
      () => `300 events stored (${seen.length})`,
      60_000,
    );
    runs.push(await counted());
    killedAt.push(seen.length);
    await kill9(p);
    p = await start();
    await waitFor(
      () => seen.length >= (killedAt[0] ?? 0) + 400,
      () => `400 more events (${seen.length})`,
      60_000,
    );
    runs.push(await counted());
    killedAt.push(seen.length);
    await kill9(p);
    p = await start();
    await waitFor(
      () => new Set(seen).size >= EVENTS,
      () => `all ${EVENTS} events (${new Set(seen).size})`,
      120_000,
    );
    runs.push(await counted());
    const figures = `${kind}: ${EVENTS} events in ${Date.now() - began} ms with 2 kills (in the room at each kill: ${killedAt.join(', ')}); per process stored/duplicate: ${runs.map((r) => `${r.stored}/${r.duplicate}`).join(', ')}`;
    t.diagnostic(figures);
    process.stderr.write(`crash-resume: ${figures}\n`);
    // What the killed processes stored before they died, they reported before: the sum is exact
    // only if nothing was stored twice (a duplicate send would be counted `duplicate`, not `stored`).
    assert.ok(
      runs.reduce((n, r) => n + r.stored, 0) <= EVENTS,
      'no process stored an event another had stored',
    );
    const history = (await historyOf(alice.agent, room)).filter((e) => e.message.metadata?.['source-id']);
    const stored = history.map((e) => e.message.metadata?.['source-id']);
    assert.equal(
      stored.length,
      EVENTS,
      `stored ${stored.length} messages for ${EVENTS} events (killed at ${killedAt})`,
    );
    assert.deepEqual(stored, emitted, 'each event once, in the source’s order');
    // Salesforce holds the last event as the subscription's committed position.
    if (managed)
      await waitFor(
        () => sf.committedReplayId('Crash_Accounts') === lastReplayId,
        'the last event committed',
      );
    await kill9(p);
  }
});
