/**
 * The bridges, measured: `pnpm --filter @parley/test bench:bridges [events]`.
 *
 * Per bridge, against its local protocol server and a whole local Parley in this process:
 * - throughput: a backlog of `events` source events (Salesforce: pre-emitted, subscribed from
 *   EARLIEST, with Subscribe and with ManagedSubscribe — which commits each batch's replay id at
 *   the server and waits for the answer, whose round trip is reported too; SAP and Databricks: webhook posts one after the other, as one Event Mesh queue or one
 *   destination delivers) until the last is stored in its room, as events/s and as a ratio to the
 *   baseline — the same agent sending the same messages with `room.send` one after the other;
 * - latency: events at a steady 100/s for 3 s, from the source event (emit, or the webhook POST) to
 *   the room log storing it (the bridge's send acknowledged), p50/p99.
 */

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  attachDatabricks,
  attachSalesforce,
  attachSap,
  type IngestResult,
  type RunningBridge,
  type SourceEvent,
  startBridge,
} from '@parley/bridge';
import { s4Event, startLocalDatabricks, startLocalSalesforce, startLocalSap } from '@parley/bridge/local';
import { registryApi } from '@parley/contracts';
import { silentLogger } from '@parley/kit';
import { connectAdmin, startParley } from '../harness/index.js';
import { percentiles } from './stats.js';

const N = Number(process.argv[2] ?? 1000);
const parley = await startParley();
const dir = await mkdtemp(join(tmpdir(), 'parley-bench-bridges-'));
const admin = await connectAdmin(parley);
const out = (s: string) => process.stdout.write(`${s}\n`);

async function bridgeFor(
  name: string,
  mapping: (room: string) => string,
): Promise<{ running: RunningBridge; room: string; stored: Map<string, number> }> {
  const r = await admin.call(registryApi.createAgent, { card: { name: `${name}-bench`, runtime: 'bridge' } });
  const room = (await admin.rooms.create(`${name} bench`, { members: [r.agent.id] })).id;
  const running = await startBridge({
    servers: parley.natsUrl,
    creds: r.credentials.creds,
    stateDir: join(dir, name),
    log: silentLogger(),
    processMetrics: false,
    mapping: mapping(room),
  });
  // When each event was stored (its send acknowledged), by source id.
  const stored = new Map<string, number>();
  const ingest = running.bridge.ingest.bind(running.bridge);
  running.bridge.ingest = async (ev: SourceEvent): Promise<IngestResult> => {
    const res = await ingest(ev);
    if (res.outcome === 'stored' || res.outcome === 'duplicate') stored.set(ev.id, performance.now());
    return res;
  };
  return { running, room, stored };
}

async function until(cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((r) => setTimeout(r, 5));
}

const results: string[] = [];
const report = (name: string, eps: number, baseline: number, lat: number[]) => {
  const p = percentiles(lat);
  results.push(
    `${name.padEnd(11)} ${eps.toFixed(0).padStart(5)} events/s (${(eps / baseline).toFixed(2)}× the direct send)   source → room p50 ${p.p50.toFixed(1)} ms  p99 ${p.p99.toFixed(1)} ms  (n=${lat.length})`,
  );
};

try {
  // Baseline: the same shape of message sent straight from an agent, one after the other.
  const base = await bridgeFor('baseline', (room) => `bridge: baseline\ninbound: []\n# ${room}`);
  const t0 = performance.now();
  for (let i = 0; i < N; i++) {
    await base.running.agent.rooms.room(base.room).send([
      { type: 'text', text: `UPDATE Account 001B${i}: Name` },
      {
        type: 'data',
        data: { ChangeEventHeader: { changeType: 'UPDATE', recordIds: [`001B${i}`] }, Name: `n${i}` },
      },
    ]);
  }
  const baseline = N / ((performance.now() - t0) / 1000);
  results.push(`baseline    ${baseline.toFixed(0).padStart(5)} events/s (room.send, sequential, n=${N})`);

  // Salesforce: Subscribe with the bridge's own cursor, then ManagedSubscribe (a commit per batch).
  for (const managed of [false, true]) {
    const sf = await startLocalSalesforce();
    const name = managed ? 'sf-managed' : 'salesforce';
    const b = await bridgeFor(
      name,
      (room) =>
        `bridge: ${name}\ninbound:\n  - type: /data/AccountChangeEvent*\n    to: { room: ${room} }\n    text: "{{payload.ChangeEventHeader.changeType}} Account {{payload.ChangeEventHeader.recordIds}}: {{payload.ChangeEventHeader.changedFields}}"\n`,
    );
    // Each commit's round trip (sent → CommitReplayResponse), as the bridge measures it.
    const commits: number[] = [];
    const metrics = b.running.bridge.metrics;
    const observeCommit = metrics.observeCommit.bind(metrics);
    metrics.observeCommit = (seconds) => {
      commits.push(seconds * 1000);
      observeCommit(seconds);
    };
    if (managed)
      sf.createManagedSubscription('Bench', '/data/AccountChangeEvent', { replayPreset: 'EARLIEST' });
    for (let i = 0; i < N; i++)
      sf.emitChange('Account', { recordIds: [`001S${i}`], fields: { Name: `n${i}` } });
    const start = performance.now();
    const source = attachSalesforce(b.running.bridge, {
      endpoint: sf.endpoint,
      insecure: true,
      loginUrl: sf.loginUrl,
      clientId: sf.clientId,
      clientSecret: sf.clientSecret,
      ...(managed
        ? { topics: [], managed: [{ name: 'Bench', topic: '/data/AccountChangeEvent' }] }
        : { topics: ['/data/AccountChangeEvent'] }),
      startAt: 'EARLIEST',
    });
    await until(() => b.stored.size >= N);
    const eps = N / ((performance.now() - start) / 1000);
    const emitted = new Map<string, number>();
    for (let i = 0; i < 300; i++) {
      const at = performance.now();
      emitted.set(sf.emitChange('Account', { recordIds: [`001L${i}`], fields: { Name: `l${i}` } }).id, at);
      await new Promise((r) => setTimeout(r, 10));
    }
    await until(() => [...emitted.keys()].every((id) => b.stored.has(id)));
    report(
      name,
      eps,
      baseline,
      [...emitted].map(([id, at]) => (b.stored.get(id) as number) - at),
    );
    if (managed) {
      const p = percentiles(commits);
      results.push(
        `${''.padEnd(11)} commit round trip (CommitReplayRequest → CommitReplayResponse) p50 ${p.p50.toFixed(2)} ms  p99 ${p.p99.toFixed(2)} ms  (${commits.length} commits)`,
      );
    }
    await source.stop();
    await b.running.stop();
    await sf.stop();
  }

  // SAP: Event Mesh pushes.
  {
    const sap = await startLocalSap();
    const b = await bridgeFor(
      'sap',
      (room) =>
        `bridge: sap\ninbound:\n  - type: sap.s4.beh.salesorder.*\n    to: { room: ${room} }\n    text: "Sales order {{payload.data.SalesOrder}}: {{type}}"\n`,
    );
    attachSap(b.running.bridge, b.running.app, {
      jwksUrl: sap.jwksUrl,
      issuer: sap.issuer,
      audience: 'parley-sap-bridge',
    });
    await b.running.app.listen({ port: 0, host: '127.0.0.1' });
    const addr = b.running.app.server.address();
    const url = `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}/sap/events`;
    const token = await sap.webhookToken();
    const type = 'sap.s4.beh.salesorder.v1.SalesOrder.Changed.v1';
    const start = performance.now();
    for (let i = 0; i < N; i++) await sap.push(url, [s4Event(type, { SalesOrder: String(i) })], { token });
    const eps = N / ((performance.now() - start) / 1000);
    const lat: number[] = [];
    for (let i = 0; i < 300; i++) {
      const at = performance.now();
      const status = await sap.push(url, [s4Event(type, { SalesOrder: `L${i}` })], { token });
      if (status === 200) lat.push(performance.now() - at);
      await new Promise((r) => setTimeout(r, Math.max(0, 10 - (performance.now() - at))));
    }
    report('sap', eps, baseline, lat);
    await b.running.stop();
    await sap.stop();
  }

  // Databricks: job notifications.
  {
    const dbx = await startLocalDatabricks();
    const b = await bridgeFor(
      'databricks',
      (room) =>
        `bridge: databricks\ninbound:\n  - type: jobs.*\n    to: { room: ${room} }\n    text: "Job {{payload.job.name}} run {{payload.run.run_id}}: {{type}}"\n`,
    );
    attachDatabricks(b.running.bridge, b.running.app, { webhookUser: 'u', webhookPassword: 'p' });
    await b.running.app.listen({ port: 0, host: '127.0.0.1' });
    const addr = b.running.app.server.address();
    const dest = {
      url: `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}/databricks/notifications`,
      username: 'u',
      password: 'p',
    };
    const note = (run: number) => ({
      event_type: 'jobs.on_success',
      workspace_id: dbx.workspaceId,
      run: { run_id: run },
      job: { job_id: 7, name: 'etl' },
    });
    const start = performance.now();
    for (let i = 0; i < N; i++) await dbx.notify(dest, note(i));
    const eps = N / ((performance.now() - start) / 1000);
    const lat: number[] = [];
    for (let i = 0; i < 300; i++) {
      const at = performance.now();
      if ((await dbx.notify(dest, note(100_000 + i))) === 200) lat.push(performance.now() - at);
      await new Promise((r) => setTimeout(r, Math.max(0, 10 - (performance.now() - at))));
    }
    report('databricks', eps, baseline, lat);
    await b.running.stop();
    await dbx.stop();
  }
  await base.running.stop();
  for (const r of results) out(r);
} finally {
  await admin.close();
  await parley.destroy();
  await rm(dir, { recursive: true, force: true });
}
process.exit(0);
