/**
 * Outbound webhooks against a real HTTP receiver that verifies the Standard Webhooks signature:
 * an HTTP-only agent gets its inbox in order, retried with backoff under one webhook-id,
 * dead-lettered after maxAttempts with a notice to the owner, replayable from a position. SSRF:
 * with 127.0.0.1 explicitly allowed the tests reach the local receiver; without it, private and
 * loopback targets are refused.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { gatewayApi, inboxStream } from '@parley/contracts';
import type { Agent } from '@parley/sdk';
import {
  codeOf,
  connectAdmin,
  connectTo,
  createAgent,
  startParley,
  type TestParley,
  waitFor,
} from '@parley/test/harness';
import { Webhook } from 'standardwebhooks';
import { isPrivateAddress, resolveTarget } from '../src/outbound.js';

interface Received {
  id: string;
  event: string;
  text: string | undefined;
  roomSeq: number;
}

/** A receiver that checks signatures with `secret` and fails as `fail` says. */
async function startReceiver() {
  const received: Received[] = [];
  const attempts = new Map<string, number>();
  let secret = '';
  let fail: (text: string | undefined, attempt: number) => boolean = () => false;
  let badSignatures = 0;
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => {
      body += d;
    });
    req.on('end', () => {
      try {
        new Webhook(secret).verify(body, req.headers as Record<string, string>);
      } catch {
        badSignatures++;
        res.statusCode = 401;
        return res.end();
      }
      const p = JSON.parse(body) as {
        event: string;
        roomSeq: number;
        message: { parts: { text?: string }[] };
      };
      const id = String(req.headers['webhook-id']);
      const n = (attempts.get(id) ?? 0) + 1;
      attempts.set(id, n);
      const text = p.message.parts[0]?.text;
      if (fail(text, n)) {
        res.statusCode = 503;
        return res.end();
      }
      if (p.event === 'message') received.push({ id, event: p.event, text, roomSeq: p.roomSeq });
      res.statusCode = 204;
      res.end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/parley`,
    received,
    attempts,
    get badSignatures() {
      return badSignatures;
    },
    setSecret: (s: string) => {
      secret = s;
    },
    failWhen: (f: typeof fail) => {
      fail = f;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

describe('gateway outbound webhooks', () => {
  let parley: TestParley;
  let admin: Agent;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  before(async () => {
    receiver = await startReceiver();
    parley = await startParley({
      // The one explicit allowance these tests need: the receiver on loopback.
      gateway: { PARLEY_WEBHOOK_ALLOW_PRIVATE: '127.0.0.1', PARLEY_WEBHOOK_BACKOFF_MS: '20' },
    });
    admin = await connectAdmin(parley);
  });
  after(async () => {
    await admin?.close();
    await parley?.destroy();
    await receiver?.close();
  });

  it('delivers an agent’s inbox in order, signed, retried under one id, dead-lettered with a notice, replayable', async () => {
    const { agent: httpAgent } = await createAgent(admin, { name: 'apex-endpoint' });
    const { agent: sender, creds } = await createAgent(admin, { name: 'webhook-sender' });
    const s = await connectTo(parley, creds);
    const room = await s.rooms.create('to apex', { members: [httpAgent.id] });
    const set = await admin.call(gatewayApi.setWebhook, {
      agent: httpAgent.id,
      url: receiver.url,
      maxAttempts: 3,
    });
    receiver.setSecret(set.secret);
    // w1 fails twice before it goes through; "poison" never does.
    receiver.failWhen((text, attempt) => (text === 'w1' && attempt <= 2) || text === 'poison');
    await waitFor(() => parley.gateway.outbound.running().includes(httpAgent.id), 'the worker running');

    for (const text of ['w0', 'w1', 'w2', 'poison', 'w3']) await room.send(text);
    await waitFor(
      () => receiver.received.some((r) => r.text === 'w3'),
      () => `w3 delivered (got ${receiver.received.map((r) => r.text).join(',')})`,
    );
    assert.deepEqual(
      receiver.received.map((r) => r.text),
      ['w0', 'w1', 'w2', 'w3'],
      'in order; the poison message skipped after its tries',
    );
    const w1 = receiver.received.find((r) => r.text === 'w1') as Received;
    assert.equal(receiver.attempts.get(w1.id), 3, 'two failures, then success, under one webhook-id');
    assert.equal(receiver.badSignatures, 0);

    const shown = await admin.call(gatewayApi.getWebhook, { agent: httpAgent.id });
    assert.equal(shown.deadLetters.length, 1);
    assert.equal(shown.deadLetters[0]?.attempts, 3);
    assert.equal(JSON.stringify(shown).includes(set.secret), false);

    // The owner (the admin) is told, in its inbox's notice room.
    await waitFor(async () => {
      for (const r of await admin.rooms.list()) {
        const h = await admin.rooms.room(r.id).history({ limit: 20 });
        if (h.entries.some((e) => JSON.stringify(e.message.parts).includes('webhook_dead_letter')))
          return true;
      }
      return false;
    }, 'a dead-letter notice to the owner');

    await waitFor(async () => {
      const info = await parley.jsm.consumers.info(inboxStream(httpAgent.id), httpAgent.id);
      return info.num_ack_pending === 0 && info.num_pending === 0;
    }, 'every delivery acknowledged');

    // Replay from a position: everything after w0 again (the poison one now goes through).
    receiver.failWhen(() => false);
    const before = receiver.received.length;
    const w0Seq = receiver.received[0]?.roomSeq as number;
    const replayed = await admin.call(gatewayApi.replayWebhook, {
      agent: httpAgent.id,
      room: room.id,
      after: w0Seq,
    });
    assert.equal(replayed.delivered, 4);
    assert.deepEqual(
      receiver.received.slice(before).map((r) => r.text),
      ['w1', 'w2', 'poison', 'w3'],
    );
    assert.equal((await admin.call(gatewayApi.deleteWebhook, { agent: httpAgent.id })).deleted, true);
    await waitFor(() => !parley.gateway.outbound.running().includes(httpAgent.id), 'the worker stopped');
    assert.ok(sender.id);
    await s.close();
  });

  it('refuses private and loopback targets unless the operator allowed them (SSRF)', async () => {
    for (const a of [
      '127.0.0.1',
      '10.1.2.3',
      '172.16.0.9',
      '192.168.1.1',
      '169.254.169.254',
      '::1',
      'fd00::1',
      '::ffff:127.0.0.1',
      '0.0.0.0',
    ]) {
      assert.equal(isPrivateAddress(a), true, a);
    }
    for (const a of ['93.184.216.34', '2606:4700::1111']) assert.equal(isPrivateAddress(a), false, a);
    const none = new Set<string>();
    for (const url of [
      'http://127.0.0.1:9/x',
      'http://localhost:9/x',
      'http://[::1]:9/x',
      'http://169.254.169.254/latest/meta-data',
      'http://10.0.0.1/',
    ]) {
      assert.equal(await codeOf(resolveTarget(new URL(url), none)), 'PERMISSION_DENIED', url);
    }

    // And a gateway without the allowance refuses the receiver this suite uses.
    const strict = await startParley();
    try {
      const a = await connectAdmin(strict);
      try {
        const { agent } = await createAgent(a, { name: 'ssrf-target' });
        assert.equal(
          await codeOf(a.call(gatewayApi.setWebhook, { agent: agent.id, url: receiver.url })),
          'PERMISSION_DENIED',
        );
        assert.equal(
          await codeOf(
            a.call(gatewayApi.setWebhook, {
              agent: agent.id,
              url: 'http://169.254.169.254/latest/meta-data',
            }),
          ),
          'PERMISSION_DENIED',
        );
      } finally {
        await a.close();
      }
    } finally {
      await strict.destroy();
    }
  });
});
