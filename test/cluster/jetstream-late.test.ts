/**
 * Parley started on a 3-node cluster whose JetStream is not available yet (one node up, no meta
 * leader: the state of a cluster that just came back, or said it was ready a moment too early).
 * The start waits for JetStream instead of failing ("jetstream is not enabled", a timeout), says
 * so in its log, and once a second node is back Parley starts and delivers.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { connect, type Delivery } from '@parley/sdk';
import { freePort, openHome, type Standalone, startStandalone } from '@parley/standalone';
import { capturingLogger, startServer, type TestServer, waitFor } from '@parley/test/harness';

describe('start while JetStream is unavailable', () => {
  let cluster: TestServer | undefined;
  let parley: Standalone | undefined;
  let home: string | undefined;
  after(async () => {
    await parley?.stop();
    await cluster?.stop();
    if (home) await rm(home, { recursive: true, force: true });
  });

  it('a 3-node cluster without a meta leader: the start waits, logs why, then Parley starts and delivers', async () => {
    home = await mkdtemp(join(tmpdir(), 'parley-home-'));
    cluster = await startServer({ nodes: 3, keys: (await openHome(home)).keys });
    // Every node down, then one back alone: it says it is ready, but JetStream has no quorum.
    for (const i of [0, 1, 2]) await cluster.kill9(i);
    await cluster.restart(0);

    const { log, lines } = capturingLogger();
    const waited = () => lines.filter((l) => l.includes('JetStream not available yet'));
    let failed: unknown;
    let started = false;
    const starting = startStandalone({
      home,
      natsPort: await freePort(),
      httpPort: await freePort(),
      natsWsPort: await freePort(),
      log,
      natsServers: cluster.urls,
      backbone: { replicas: 3, inboxConsumerReplicas: 1 },
    }).then(
      (p) => {
        parley = p;
        started = true;
      },
      (err: unknown) => {
        failed = err;
      },
    );
    await waitFor(
      () => {
        if (failed) throw failed;
        return waited().length > 0;
      },
      'the start to say it waits for JetStream',
      60_000,
    );
    assert.equal(started, false, 'not started while JetStream is unavailable');
    // A second node back: quorum, a meta leader, JetStream answers.
    await Promise.all([cluster.restart(1), cluster.restart(2)]);
    await starting;
    if (failed) throw failed;
    assert.ok(parley, 'Parley started');
    assert.match(waited()[0] ?? '', /"what":"[^"]+"/, 'the log says what it waited for');

    // And it works: the admin sends to a room of its own and handles the message.
    const admin = await connect({
      servers: parley.natsUrl.split(','),
      creds: parley.home.paths.adminCreds,
      presence: false,
      delivery: { includeOwn: true },
    });
    try {
      const got: Delivery[] = [];
      admin.on('message', (d) => {
        got.push(d);
      });
      await admin.listening;
      const room = await admin.rooms.create('late-start', { members: [] });
      const sent = await admin.rooms
        .room(room.id)
        .send('hello after a late JetStream', { deadlineMs: 60_000 });
      await waitFor(() => got.some((d) => d.message.id === sent.id), 'the message to be handled', 60_000);
    } finally {
      await admin.close();
    }
  });
});
