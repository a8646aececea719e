import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { newId, subjects } from '@parley/contracts';
import { startServer, waitFor } from '@parley/test/harness';

describe('nats-server harness', () => {
  it('runs a single JetStream node that survives kill -9 with its data', async () => {
    const server = await startServer();
    try {
      const nc = await server.connect();
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: 'T', subjects: ['t.>'] });
      const js = jsm.jetstream();
      await js.publish('t.a', 'one');
      await server.kill9();
      await server.restart();
      await waitFor(async () => {
        try {
          return (await jsm.streams.info('T')).state.messages === 1;
        } catch {
          return false;
        }
      }, 'the stream after restart');
      await nc.close();
    } finally {
      await server.stop();
    }
  });

  it('runs operator mode where a participant can only speak as itself', async () => {
    const server = await startServer({ operator: true });
    try {
      assert.ok(server.operator);
      const alice = newId('agent');
      const bob = newId('agent');
      const { creds } = await server.operator.participantCreds(alice);
      const nc = await server.connect({ creds, inboxPrefix: `_INBOX.${alice}` });
      const errors: string[] = [];
      void (async () => {
        for await (const s of nc.status()) if (s.type === 'error') errors.push(String(s.error));
      })();
      nc.publish(subjects.send(alice), 'ok');
      nc.publish(subjects.send(bob), 'impersonation');
      await nc.flush();
      await waitFor(() => errors.some((e) => e.includes(bob)), 'the permission violation for bob');
      await nc.close();
    } finally {
      await server.stop();
    }
  });

  it('runs a 3-node JetStream cluster with R3 streams, and a killed leader is replaced', async () => {
    const server = await startServer({ nodes: 3 });
    assert.equal(server.urls.length, 3);
    const nc = await server.connect();
    try {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: 'R3', subjects: ['r3.>'], num_replicas: 3 });
      const js = jsm.jetstream();
      await js.publish('r3.x', 'before');
      const leader = await server.streamLeader('R3');
      await server.kill9(leader);
      await waitFor(
        async () => {
          try {
            const l = await server.streamLeader('R3');
            return l !== leader;
          } catch {
            return false;
          }
        },
        'a new stream leader',
        20_000,
      );
      await waitFor(
        async () => {
          try {
            await js.publish('r3.x', 'after', { timeout: 1000 });
            return true;
          } catch {
            return false;
          }
        },
        'a publish to succeed without the old leader',
        20_000,
      );
      await server.restart(leader);
      await waitFor(async () => (await jsm.streams.info('R3')).state.messages === 2, 'both messages');
    } finally {
      await nc.close();
      await server.stop();
    }
  });

  it('removes its temporary directory when stopped', async () => {
    const server = await startServer();
    assert.ok(existsSync(server.dir));
    await server.stop();
    assert.ok(!existsSync(server.dir));
  });
});
