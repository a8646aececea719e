/**
 * The Databricks bridge: job notifications into rooms, and a notebook run through the Jobs API 2.1
 * as a tool call with its progress — against our local workspace and a real backbone.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startParley, type TestParley, waitFor } from '@parley/test/harness';
import { ACTION_MEDIA_TYPE, RESULT_MEDIA_TYPE } from '../src/bridge.js';
import { attachDatabricks } from '../src/databricks/index.js';
import { type LocalDatabricks, startLocalDatabricks } from '../src/local/databricks-server.js';
import type { RunningBridge } from '../src/runtime.js';
import { type Member, messagesOf, startWebhookBridge, textOf, type WebhookBridge } from './helpers.js';

describe('databricks bridge', () => {
  let parley: TestParley;
  let dbx: LocalDatabricks;
  let b: WebhookBridge;
  let world: WebhookBridge['world'];
  let alice: Member;
  let bridgeId: string;
  let room: string;
  let running: RunningBridge;
  let url: string;
  const dest = { username: 'parley', password: 'n0t-a-real-secret' };

  before(async () => {
    parley = await startParley();
    dbx = await startLocalDatabricks();
    dbx.notebooks.set('/Repos/risk/score_account', (p) => ({
      output: { account: p.account, score: 0.82, band: 'high' },
    }));
    dbx.notebooks.set('/Repos/risk/broken', () => ({ fail: 'Py4JJavaError: table risk.features not found' }));
    b = await startWebhookBridge(parley, {
      name: 'databricks',
      scope: 'tool:databricks.runs.submit',
      path: '/databricks/notifications',
      mapping: (room) => `
bridge: databricks
inbound:
  - type: jobs.on_failure
    to: { room: ${room} }
    text: "Job {{payload.job.name}} run {{payload.run.run_id}} failed"
  - type: jobs.on_success
    to: { room: ${room} }
    text: "Job {{payload.job.name}} run {{payload.run.run_id}} succeeded"
outbound:
  - action: score
    tool: databricks.runs.submit
    args: { notebook: /Repos/risk/score_account }
    reply: "risk score {{result.output.score}} ({{result.output.band}}), run {{result.run_id}} {{result.result_state}}"
  - action: broken
    tool: databricks.runs.submit
    args: { notebook: /Repos/risk/broken }
`,
      attach: (r) =>
        attachDatabricks(r.bridge, r.app, {
          webhookUser: dest.username,
          webhookPassword: dest.password,
          jobs: { host: dbx.host, token: dbx.token, pollMs: 20, existingClusterId: '0923-164208-meows279' },
        }),
    });
    ({ world, alice, bridgeId, room, running, url } = b);
  });
  after(async () => {
    await b?.close();
    await dbx?.stop();
    await parley?.destroy();
  });

  const notes = () => b.fromSource();

  it('stores job notifications (string or number ids) once each; refuses unauthenticated and malformed ones; ignores unmapped types', async () => {
    const d = { url, ...dest };
    const failure = {
      event_type: 'jobs.on_failure',
      workspace_id: dbx.workspaceId,
      run: { run_id: 4242 },
      job: { job_id: '77', name: 'nightly-etl' },
    };
    assert.equal(await dbx.notify(d, failure), 200);
    assert.equal(await dbx.notify(d, failure), 200);
    assert.equal(
      await dbx.notify(d, {
        event_type: 'jobs.on_success',
        workspace_id: Number(dbx.workspaceId),
        run: { run_id: '4243' },
        job: { job_id: 77, name: 'nightly-etl' },
      }),
      200,
    );
    assert.equal(await dbx.notify({ ...d, password: 'guess' }, failure), 401);
    const noAuth = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(failure),
    });
    assert.equal(noAuth.status, 401);
    assert.equal(await dbx.notify(d, { event_type: 'jobs.on_failure', run: {} }), 400);
    assert.equal(
      await dbx.notify(d, { ...failure, event_type: 'jobs.on_duration_warning_threshold_exceeded' }),
      200,
    );
    assert.deepEqual(
      (await notes()).map((m) => textOf(m.message)),
      ['Job nightly-etl run 4242 failed', 'Job nightly-etl run 4243 succeeded'],
    );
    const m = running.bridge.metrics;
    assert.deepEqual(
      [
        m.count('duplicate'),
        m.count('refused', 'unauthenticated'),
        m.count('refused', 'unsigned'),
        m.count('refused', 'malformed'),
        m.count('ignored'),
      ],
      [1, 1, 1, 1, 1],
    );
  });

  it('runs a scoring notebook through runs/submit, posts each life-cycle state, and answers with the output', async () => {
    const token = (await alice.agent.tokens.issue(bridgeId, ['tool:databricks.runs.submit'])).token;
    const ask = await alice.agent.rooms.room(room).send(
      [
        { type: 'text', text: 'score 001ACME' },
        {
          type: 'data',
          mediaType: ACTION_MEDIA_TYPE,
          data: { agent: bridgeId, action: 'score', args: { account: '001ACME' } },
        },
      ],
      { delegation: token, mentions: [bridgeId] },
    );
    const replies = async () =>
      (await messagesOf(alice.agent, room)).filter((m) => m.message.replyTo === ask.id);
    await waitFor(
      async () => (await replies()).some((m) => m.message.kind === 'message'),
      'the final answer',
    );
    const all = await replies();
    const final = all.find((m) => m.message.kind === 'message');
    const result = final?.message.parts.find((p) => p.type === 'data' && p.mediaType === RESULT_MEDIA_TYPE);
    assert.ok(result?.type === 'data');
    const run = result.data.result as { run_id: number; output: unknown };
    assert.deepEqual(run.output, { account: '001ACME', score: 0.82, band: 'high' });
    assert.equal(textOf(final?.message), `risk score 0.82 (high), run ${run.run_id} SUCCESS`);
    assert.deepEqual(
      all.filter((m) => m.message.kind === 'status').map((m) => textOf(m.message)),
      [
        `run ${run.run_id}: PENDING — Waiting for cluster`,
        `run ${run.run_id}: RUNNING`,
        `run ${run.run_id}: TERMINATED`,
      ],
    );
    // What reached the Jobs API: the notebook the rule fixes, the request's parameters, a cluster, a token.
    const sub = dbx.submits[0] as {
      tasks: { notebook_task: unknown; existing_cluster_id: string }[];
      idempotency_token: string;
    };
    assert.deepEqual(sub.tasks[0]?.notebook_task, {
      notebook_path: '/Repos/risk/score_account',
      base_parameters: { account: '001ACME' },
    });
    assert.equal(sub.tasks[0]?.existing_cluster_id, '0923-164208-meows279');
    assert.equal(sub.idempotency_token.length, 64);
  });

  it('a failed run is answered as failed with the state message', async () => {
    const token = (await alice.agent.tokens.issue(bridgeId, ['tool:databricks.runs.submit'])).token;
    const ask = await alice.agent.rooms.room(room).send(
      [
        {
          type: 'data',
          mediaType: ACTION_MEDIA_TYPE,
          data: { agent: bridgeId, action: 'broken', args: {} },
        },
      ],
      { delegation: token, mentions: [bridgeId] },
    );
    const answer = async () =>
      (await messagesOf(alice.agent, room)).find(
        (m) => m.message.replyTo === ask.id && m.message.kind === 'message',
      );
    await waitFor(async () => (await answer()) !== undefined, 'the answer');
    assert.match(
      textOf((await answer())?.message),
      /^broken failed: .*FAILED: Py4JJavaError: table risk.features not found/,
    );
  });

  it('authenticates to the Jobs API as a service principal (OAuth M2M) when given one', async () => {
    const agent = await world.connect(
      (await world.bridgeAgent(alice, 'databricks-m2m', ['tool:databricks.runs.submit'])).creds,
    );
    const m2m = await world.bridge(
      agent,
      `bridge: databricks-m2m\noutbound:\n  - action: score\n    tool: databricks.runs.submit\n    args: { notebook: /Repos/risk/score_account }\n    reply: "score {{result.output.score}}"\n`,
    );
    const app = (await import('fastify')).default();
    attachDatabricks(m2m, app, {
      webhookUser: 'x',
      webhookPassword: 'y',
      jobs: { host: dbx.host, ...dbx.oauthClient, pollMs: 20 },
    });
    await m2m.start();
    await alice.agent.rooms.room(room).invite(m2m.id);
    const token = (await alice.agent.tokens.issue(m2m.id, ['tool:databricks.runs.submit'])).token;
    const ask = await alice.agent.rooms.room(room).send(
      [
        {
          type: 'data',
          mediaType: ACTION_MEDIA_TYPE,
          data: { agent: m2m.id, action: 'score', args: { account: '001M2M' } },
        },
      ],
      { delegation: token, mentions: [m2m.id] },
    );
    const answer = async () =>
      (await messagesOf(alice.agent, room)).find(
        (m) => m.message.replyTo === ask.id && m.message.kind === 'message',
      );
    await waitFor(async () => (await answer()) !== undefined, 'the answer');
    assert.equal(textOf((await answer())?.message), 'score 0.82');
    assert.equal(dbx.oauthTokensIssued(), 1, 'one token, reused for every call of the run');
    await app.close();
  });
});
