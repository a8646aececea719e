/**
 * The enterprise demo end to end: a Salesforce CDC event opens a case, Databricks scores it, SAP
 * reports open orders, maria approves, a Platform Event goes back to Salesforce — one trace.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { governanceApi } from '@parley/contracts';
import { loadTelemetryConfig } from '@parley/kit';
import { type OtlpReceiver, startOtlpReceiver, startParley, type TestParley } from '@parley/test/harness';
import { RESULT_MEDIA_TYPE } from '../src/bridge.js';
import { type EnterpriseDemo, runEnterpriseDemo } from '../src/demo/enterprise.js';
import { historyOf, textOf } from './helpers.js';

describe('enterprise demo', () => {
  let parley: TestParley;
  let demo: EnterpriseDemo | undefined;
  let dir: string;
  let receiver: OtlpReceiver;

  before(async () => {
    receiver = await startOtlpReceiver();
    parley = await startParley({
      telemetry: loadTelemetryConfig({
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      }),
      telemetryBatch: { scheduledDelayMillis: 20 },
    });
    dir = await mkdtemp(join(tmpdir(), 'parley-enterprise-'));
  });
  after(async () => {
    await demo?.stop();
    await parley?.destroy();
    await receiver?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('runs the case across Salesforce, Databricks and SAP to an approved credit hold, in one trace', async () => {
    const lines: string[] = [];
    demo = await runEnterpriseDemo({
      natsUrl: parley.natsUrl,
      adminCreds: parley.home.paths.adminCreds,
      org: parley.home.state.org.id,
      stateDir: dir,
      out: (l) => lines.push(l),
    });
    const { published } = await Promise.race([
      demo.finished,
      new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error(`demo did not finish:\n${lines.join('\n')}`)), 60_000).unref(),
      ),
    ]);
    assert.equal(published.Account_Id__c, '0018c00002ACMEAAAA');
    assert.match(String(published.Reason__c), /risk 0.91, approved by maria/);

    const caseLines = lines.filter((l) => l.startsWith('case  '));
    const said = (who: string, re: RegExp) =>
      caseLines.some((l) => l.startsWith(`case  ${who.padEnd(10)}`) && re.test(l));
    assert.ok(
      said('salesforce', /Acme Industrial changed \(AnnualRevenue, Rating\): Rating Cold/),
      caseLines.join('\n'),
    );
    assert.ok(said('databricks', /· run \d+: RUNNING/), caseLines.join('\n'));
    assert.ok(said('databricks', /risk score 0.91 \(high\)/), caseLines.join('\n'));
    assert.ok(said('sap', /3 open sales orders for customer 1000123, 182400.00 EUR/), caseLines.join('\n'));
    assert.ok(said('salesforce', /I propose a credit hold/), caseLines.join('\n'));
    assert.ok(said('maria', /Approved/), caseLines.join('\n'));
    assert.ok(said('salesforce', /Credit_Hold__e published/), caseLines.join('\n'));
  });

  it('every message of the case carries the CDC event’s trace, and the publish is audited as maria’s', async () => {
    assert.ok(demo);
    const { room } = await demo.finished;
    const entries = (await historyOf(demo.maria, room)).filter(
      (e) => e.message.kind === 'message' || e.message.kind === 'status',
    );
    assert.ok(entries.length >= 9, `the case has its messages (${entries.length})`);
    const traces = new Set(entries.map((e) => e.message.trace?.traceparent.split('-')[1]));
    assert.deepEqual([...traces], [demo.traceId], 'one trace across the case');
    // Who acted for whom: the CDC message and the publish are on maria's authority.
    const first = entries[0];
    assert.equal(first?.message.sender.id, demo.ids.salesforce);
    assert.equal(first?.message.onBehalfOf?.principal, demo.ids.maria);
    const publishAnswer = entries.find((e) => textOf(e.message).includes('Credit_Hold__e published'));
    const result = publishAnswer?.message.parts.find(
      (p) => p.type === 'data' && p.mediaType === RESULT_MEDIA_TYPE,
    );
    assert.ok(result?.type === 'data');
    const chain = await demo.maria.call(
      governanceApi.auditChain,
      { of: result.data.toolCall as string },
      { timeout: 30_000 },
    );
    assert.equal(chain.hops[0]?.kind, 'tool_call');
    assert.equal(chain.hops[0]?.status, 'ok');
    assert.equal(chain.origin, demo.ids.maria);
  });

  it('exports the case as one trace: the bridge’s handling of the CDC event and each system’s tool call', async () => {
    assert.ok(demo);
    await demo.finished;
    await parley.telemetry?.forceFlush();
    const traceId = demo.traceId;
    const wanted = [
      'bridge salesforce',
      'execute_tool databricks.runs.submit',
      'execute_tool sap.salesorders.open',
      'execute_tool salesforce.publish',
    ];
    const spans = await receiver.waitForSpans(
      (all) => wanted.every((n) => all.some((s) => s.traceId === traceId && s.name === n)),
      { what: `the spans ${wanted.join(', ')} in trace ${traceId}`, timeoutMs: 30_000 },
    );
    const inTrace = spans.filter((s) => s.traceId === traceId);
    // The ingress stored every message of the case inside this trace.
    assert.ok(inTrace.filter((s) => s.name === 'process send').length >= 9, 'the case’s sends, in the trace');
    const publish = inTrace.find((s) => s.name === 'execute_tool salesforce.publish');
    assert.equal(publish?.attributes['parley.on_behalf_of'], demo.ids.maria);
  });
});
