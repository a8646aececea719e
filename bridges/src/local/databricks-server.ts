/**
 * A local Databricks workspace for tests and the enterprise demo: the Jobs API 2.1 endpoints a
 * one-time run needs (`runs/submit` with `idempotency_token`, `runs/get`, `runs/get-output`),
 * bearer-token auth, runs that move PENDING → RUNNING → TERMINATED one step per `runs/get`, and
 * job notifications (`jobs.on_start`, `jobs.on_success`, `jobs.on_failure`) posted with Basic
 * credentials to webhook destinations named in the run's `webhook_notifications`.
 */
import { randomBytes } from 'node:crypto';
import Fastify from 'fastify';

/** What a notebook "computes" in the local workspace: its output, or a failure. */
export type NotebookBehaviour = (params: Record<string, string>) => { output: unknown } | { fail: string };

/** A destination notifications go to. */
export interface Destination {
  url: string;
  username: string;
  password: string;
}

interface Run {
  run_id: number;
  task_run_id: number;
  run_name: string;
  notebook: string;
  params: Record<string, string>;
  steps: string[];
  step: number;
  result?: { output: unknown } | { fail: string };
  notifications: Record<string, { id: string }[]>;
}

/** A running local workspace. */
export interface LocalDatabricks {
  host: string;
  token: string;
  /** A service principal's OAuth client (`/oidc/v1/token`). */
  oauthClient: { clientId: string; clientSecret: string };
  /** Access tokens issued through OAuth. */
  oauthTokensIssued(): number;
  workspaceId: string;
  /** Requests to runs/submit, as received. */
  submits: Record<string, unknown>[];
  /** How notebooks behave, by path. */
  notebooks: Map<string, NotebookBehaviour>;
  /** Notification destinations by id. */
  destinations: Map<string, Destination>;
  /** Posts one notification to `dest` (what the workspace does on a run event). */
  notify(dest: Destination, body: unknown): Promise<number>;
  stop(): Promise<void>;
}

/** Starts a local workspace on a free port. */
export async function startLocalDatabricks(): Promise<LocalDatabricks> {
  const token = `dapi${randomBytes(16).toString('hex')}`;
  const workspaceId = String(1_000_000_000 + Math.floor(Math.random() * 1e9));
  const runs = new Map<number, Run>();
  const byIdem = new Map<string, number>();
  const submits: Record<string, unknown>[] = [];
  const notebooks = new Map<string, NotebookBehaviour>();
  const destinations = new Map<string, Destination>();
  let nextRun = 100;
  const app = Fastify();
  // OAuth M2M for a service principal: client credentials (Basic) → a short-lived access token.
  const oauthClient = {
    clientId: randomBytes(8).toString('hex'),
    clientSecret: randomBytes(16).toString('hex'),
  };
  const issued = new Set<string>();
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_r, body, done) =>
    done(null, Object.fromEntries(new URLSearchParams(body as string))),
  );
  app.post('/oidc/v1/token', async (req, reply) => {
    const basic = /^Basic (.+)$/.exec(req.headers.authorization ?? '')?.[1];
    const [id, secret] = Buffer.from(basic ?? '', 'base64')
      .toString('utf8')
      .split(':');
    const form = (req.body ?? {}) as Record<string, string>;
    if (form.grant_type !== 'client_credentials')
      return reply.code(400).send({ error: 'unsupported_grant_type' });
    if (
      decodeURIComponent(id ?? '') !== oauthClient.clientId ||
      decodeURIComponent(secret ?? '') !== oauthClient.clientSecret
    ) {
      return reply.code(401).send({ error: 'invalid_client' });
    }
    const t = `eyJ${randomBytes(24).toString('base64url')}`;
    issued.add(t);
    return { access_token: t, token_type: 'Bearer', expires_in: 3600, scope: form.scope ?? 'all-apis' };
  });
  app.addHook('onRequest', async (req, reply) => {
    if (req.url.startsWith('/oidc/')) return;
    const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
    if (bearer !== token && !(bearer && issued.has(bearer))) {
      return reply.code(401).send({ error_code: 'UNAUTHENTICATED', message: 'Invalid access token.' });
    }
  });
  const notify = async (dest: Destination, body: unknown) => {
    const res = await fetch(dest.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: `Basic ${Buffer.from(`${dest.username}:${dest.password}`).toString('base64')}`,
      },
      body: JSON.stringify(body),
    }).catch(() => undefined);
    await res?.arrayBuffer();
    return res?.status ?? 0;
  };
  const fire = async (run: Run, kind: 'on_start' | 'on_success' | 'on_failure') => {
    for (const { id } of run.notifications[kind] ?? []) {
      const dest = destinations.get(id);
      if (dest) {
        await notify(dest, {
          event_type: `jobs.${kind}`,
          workspace_id: workspaceId,
          run: { run_id: run.run_id },
          job: { job_id: run.run_id, name: run.run_name },
        });
      }
    }
  };

  app.post('/api/2.1/jobs/runs/submit', async (req, reply) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    submits.push(body);
    const tasks = body.tasks as
      | {
          task_key?: string;
          notebook_task?: { notebook_path?: string; base_parameters?: Record<string, string> };
        }[]
      | undefined;
    const task = tasks?.[0];
    if (
      !Array.isArray(tasks) ||
      tasks.length === 0 ||
      !task?.task_key ||
      !task.notebook_task?.notebook_path
    ) {
      return reply.code(400).send({
        error_code: 'INVALID_PARAMETER_VALUE',
        message: 'tasks[0] needs task_key and notebook_task.notebook_path',
      });
    }
    const idem = typeof body.idempotency_token === 'string' ? body.idempotency_token : undefined;
    if (idem && idem.length > 64)
      return reply
        .code(400)
        .send({ error_code: 'INVALID_PARAMETER_VALUE', message: 'idempotency_token too long' });
    if (idem && byIdem.has(idem)) return { run_id: byIdem.get(idem) };
    const run: Run = {
      run_id: nextRun++,
      task_run_id: nextRun++,
      run_name: String(body.run_name ?? 'Untitled'),
      notebook: task.notebook_task.notebook_path,
      params: task.notebook_task.base_parameters ?? {},
      steps: ['PENDING', 'RUNNING', 'TERMINATED'],
      step: 0,
      notifications: (body.webhook_notifications ?? {}) as Run['notifications'],
    };
    runs.set(run.run_id, run);
    if (idem) byIdem.set(idem, run.run_id);
    return { run_id: run.run_id };
  });

  const stateOf = (run: Run) => {
    const life = run.steps[run.step] as string;
    if (life !== 'TERMINATED')
      return { life_cycle_state: life, state_message: life === 'PENDING' ? 'Waiting for cluster' : '' };
    const failed = run.result && 'fail' in run.result;
    return {
      life_cycle_state: life,
      result_state: failed ? 'FAILED' : 'SUCCESS',
      state_message: failed ? (run.result as { fail: string }).fail : '',
      user_cancelled_or_timedout: false,
    };
  };

  app.get('/api/2.1/jobs/runs/get', async (req, reply) => {
    const run = runs.get(Number((req.query as { run_id?: string }).run_id));
    if (!run)
      return reply.code(400).send({ error_code: 'INVALID_PARAMETER_VALUE', message: 'Run not found' });
    const view = { ...stateOf(run) };
    if (run.step < run.steps.length - 1) {
      run.step++;
      if (run.steps[run.step] === 'RUNNING') await fire(run, 'on_start');
      if (run.steps[run.step] === 'TERMINATED') {
        const behaviour = notebooks.get(run.notebook) ?? (() => ({ output: null }));
        run.result = behaviour(run.params);
        await fire(run, 'fail' in run.result ? 'on_failure' : 'on_success');
      }
    }
    return {
      run_id: run.run_id,
      run_name: run.run_name,
      run_type: 'SUBMIT_RUN',
      run_page_url: `${host}/#job/runs/${run.run_id}`,
      state: view,
      tasks: [{ run_id: run.task_run_id, task_key: 'parley', state: view }],
    };
  });

  app.get('/api/2.1/jobs/runs/get-output', async (req, reply) => {
    const id = Number((req.query as { run_id?: string }).run_id);
    const run = [...runs.values()].find((r) => r.task_run_id === id);
    if (!run)
      return reply
        .code(400)
        .send({ error_code: 'INVALID_PARAMETER_VALUE', message: 'Run not found (a task run id is needed)' });
    const out = run.result && 'output' in run.result ? run.result.output : undefined;
    return {
      metadata: { run_id: id },
      notebook_output: out === undefined ? {} : { result: JSON.stringify(out), truncated: false },
    };
  });

  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  const host = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  return {
    host,
    token,
    oauthClient,
    oauthTokensIssued: () => issued.size,
    workspaceId,
    submits,
    notebooks,
    destinations,
    notify,
    stop: () => app.close(),
  };
}
