/**
 * One trace per conversation: a human's message → agent A → the room → agent B → B's tool call →
 * B's reply → A, exported by the services and by each agent (its own service.name) to an in-test
 * OTLP receiver, with the exact parent/child chain and one producer span per fan-out recipient.
 */
import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { isParleyError, runInSpan, startToolSpan } from '@parley/contracts';
import { loadTelemetryConfig } from '@parley/kit';
import type { Agent, Delivery } from '@parley/sdk';
import { runCli } from '@parley/sdk/cli';
import {
  type OtlpReceiver,
  type ReceivedSpan,
  startOtlpReceiver,
  startParley,
  type TestParley,
  textOf,
  waitFor,
} from '@parley/test/harness';

describe('tracing the message path', () => {
  let receiver: OtlpReceiver;
  let parley: TestParley;
  before(async () => {
    receiver = await startOtlpReceiver();
    parley = await startParley({
      telemetry: loadTelemetryConfig({
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      }),
      telemetryBatch: { scheduledDelayMillis: 20 },
    });
  });
  after(async () => {
    await parley?.destroy();
    await receiver?.close();
  });

  it('keeps a conversation across people, agents, services and a tool call in one trace', async () => {
    const tracer = (name: string) => parley.telemetry?.tracer(name);
    // The local admin owns the agents participant() registers: no consent step needed here.
    const human = {
      id: parley.home.state.admin.id,
      creds: await readFile(parley.home.paths.adminCreds, 'utf8'),
    };
    const a = await parley.participant();
    const b = await parley.participant();
    const connect = async (p: { creds: string }, name: string): Promise<Agent> => {
      const t = tracer(name);
      return parley.connect(p.creds, { presence: false, ...(t ? { tracer: t } : {}) });
    };
    const alice = await connect(human, 'alice');
    const agentA = await connect(a, 'agent-a');
    const agentB = await connect(b, 'agent-b');
    let answered!: (d: Delivery) => void;
    const answer = new Promise<Delivery>((r) => {
      answered = r;
    });
    agentA.on('message', async (d) => {
      if (d.message.sender.id === human.id) {
        await agentA.rooms.room(d.room).send('B, what is the payroll total?', { mentions: [b.id] });
      } else if (d.message.sender.id === b.id) answered(d);
    });
    agentB.on('message', async (d) => {
      if (d.message.sender.id !== a.id) return;
      const total = await runInSpan(startToolSpan(agentB.tracer, 'hr.payroll.read'), async () => 'USD 1.2M');
      await agentB.rooms.room(d.room).send(`The total is ${total}`, { mentions: [a.id] });
    });
    await Promise.all([agentA.listening, agentB.listening]);
    const room = await alice.rooms.create('payroll question', { members: [a.id, b.id] });
    const first = await room.send('A, please find out the payroll total');
    const reply = await answer;
    assert.equal(textOf(reply), 'The total is USD 1.2M');
    await parley.telemetry?.forceFlush();

    // Spans arrive as each one ends, and a sender's span can end after the delivery it caused (its
    // send waits for the ingress's answer). So wait for what is asserted: the answer's delivery to
    // A with every ancestor up to the human's send, the tool call, and the first fan-out's three
    // producer spans.
    const byId = new Map<string, ReceivedSpan>();
    const parentOf = (s: ReceivedSpan) => (s.parentSpanId ? byId.get(s.parentSpanId) : undefined);
    const chain = (s: ReceivedSpan | undefined): string[] => {
      const out: string[] = [];
      for (let x = s; x; x = parentOf(x)) out.unshift(`${x.service}:${x.name}`);
      return out;
    };
    const isLast = (s: ReceivedSpan) =>
      s.name === 'process inbox' &&
      s.attributes['parley.recipient'] === a.id &&
      s.attributes['messaging.message.id'] === reply.message.id;
    const isRoot = (s: ReceivedSpan) =>
      s.name === 'send room' && s.attributes['messaging.message.id'] === first.id;
    const isFirstFanout = (s: ReceivedSpan) =>
      s.name === 'fanout room' && s.attributes['parley.room.seq'] === first.roomSeq;
    const spans = await receiver.waitForSpans(
      (all) => {
        byId.clear();
        for (const s of all) byId.set(s.spanId, s);
        let top = all.find(isLast);
        while (top && parentOf(top)) top = parentOf(top);
        const fanout = all.find(isFirstFanout);
        return (
          top !== undefined &&
          isRoot(top) &&
          all.some((s) => s.name === 'execute_tool hr.payroll.read') &&
          fanout !== undefined &&
          all.filter((s) => s.name === 'publish inbox' && s.parentSpanId === fanout.spanId).length >= 3
        );
      },
      {
        what: 'the whole conversation: the answer to A back to the human’s send, the tool call, the fan-out',
      },
    );
    const root = spans.find(isRoot);
    assert.ok(root, 'the human’s send span');
    const trace = spans.filter((s) => s.traceId === root.traceId);
    // The answer's delivery to A, walked back to the human who started it.
    const last = trace.find(isLast);
    assert.deepEqual(chain(last), [
      'parley-alice:send room',
      'parley-rooms:process send',
      'parley-rooms:fanout room',
      'parley-rooms:publish inbox',
      'parley-agent-a:process inbox',
      'parley-agent-a:send room',
      'parley-rooms:process send',
      'parley-rooms:fanout room',
      'parley-rooms:publish inbox',
      'parley-agent-b:process inbox',
      'parley-agent-b:send room',
      'parley-rooms:process send',
      'parley-rooms:fanout room',
      'parley-rooms:publish inbox',
      'parley-agent-a:process inbox',
    ]);
    // The tool call is a child of B's delivery, a sibling of its reply.
    const tool = trace.find((s) => s.name === 'execute_tool hr.payroll.read');
    assert.equal(tool?.service, 'parley-agent-b');
    assert.equal(parentOf(tool as ReceivedSpan)?.name, 'process inbox');
    assert.equal(tool?.attributes['gen_ai.tool.name'], 'hr.payroll.read');
    // One producer span per recipient of the first message (3 members).
    const firstFanout = trace.find(isFirstFanout);
    assert.ok(firstFanout);
    const recipients = trace
      .filter((s) => s.name === 'publish inbox' && s.parentSpanId === firstFanout.spanId)
      .map((s) => s.attributes['parley.recipient']);
    assert.deepEqual([...recipients].sort(), [human.id, a.id, b.id].sort());
    // Messaging conventions.
    const ingress = parentOf(firstFanout);
    assert.equal(ingress?.kind, 'server');
    assert.equal(ingress?.attributes['messaging.system'], 'nats');
    assert.equal(ingress?.attributes['messaging.destination.name'], `parley.in.${human.id}.send`);
    assert.equal(ingress?.attributes['parley.room.id'], room.id);
    assert.equal(root.kind, 'producer');
    assert.equal(firstFanout.kind, 'consumer');
    assert.equal(new Set(trace.map((s) => s.service)).size, 4);

    // `parley trace` finds the same trace id, and the Jaeger link.
    const lines: string[] = [];
    const outsider = await parley.participant();
    const outsiderCreds = join(parley.home.paths.credsDir, 'outsider.creds');
    await writeFile(outsiderCreds, outsider.creds);
    const code = await runCli(
      ['trace', first.id, '--room', room.id, '--json', '--server', parley.natsUrl, '--as', outsiderCreds],
      { out: (l) => lines.push(l), err: (l) => lines.push(l) },
      { PARLEY_JAEGER_URL: 'http://jaeger.example:16686/' },
    );
    assert.equal(code, 1, 'an outsider is not a member of that room');
    assert.match(lines.join('\n'), /^NOT_A_MEMBER: /);
    await writeFile(join(parley.home.paths.credsDir, 'alice.creds'), human.creds);
    lines.length = 0;
    assert.equal(
      await runCli(
        [
          'trace',
          first.id,
          '--room',
          room.id,
          '--json',
          '--server',
          parley.natsUrl,
          '--as',
          join(parley.home.paths.credsDir, 'alice.creds'),
        ],
        { out: (l) => lines.push(l), err: (l) => lines.push(l) },
        { PARLEY_JAEGER_URL: 'http://jaeger.example:16686/' },
      ),
      0,
      lines.join('\n'),
    );
    const printed = JSON.parse(lines.join('\n')) as { traceId: string; jaeger: string };
    assert.equal(printed.traceId, root.traceId);
    assert.equal(printed.jaeger, `http://jaeger.example:16686/trace/${root.traceId}`);
  });

  it('marks a refused send as an error on the sender’s span and the ingress span', async () => {
    const member = await parley.participant();
    const outsider = await parley.participant();
    const t = parley.telemetry?.tracer('outsider');
    const owner = await parley.connect(member.creds, { presence: false });
    const them = await parley.connect(outsider.creds, { presence: false, ...(t ? { tracer: t } : {}) });
    const room = await owner.rooms.create('closed circle');
    await assert.rejects(them.rooms.room(room.id).send('let me in'), (e) => isParleyError(e, 'NOT_A_MEMBER'));
    await parley.telemetry?.forceFlush();
    const spans = await receiver.waitForSpans(
      (all) =>
        all.some(
          (s) => s.service === 'parley-outsider' && s.name === 'send room' && s.status.code === 'error',
        ),
      { what: 'the refused send' },
    );
    const send = spans.find(
      (s) => s.service === 'parley-outsider' && s.name === 'send room' && s.status.code === 'error',
    );
    assert.equal(send?.attributes['parley.error.code'], 'NOT_A_MEMBER');
    await waitFor(() => receiver.spans.some((s) => s.parentSpanId === send?.spanId), 'the ingress span');
    const ingress = receiver.spans.find((s) => s.parentSpanId === send?.spanId);
    assert.equal(ingress?.service, 'parley-rooms');
    assert.equal(ingress?.status.code, 'error');
    assert.equal(ingress?.attributes['parley.error.code'], 'NOT_A_MEMBER');
  });
});
