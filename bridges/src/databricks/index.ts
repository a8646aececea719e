/**
 * The Databricks bridge. Inbound: job-run notifications from a workspace's webhook notification
 * destination (`jobs.on_start`, `jobs.on_success`, `jobs.on_failure`, …), posted to the bridge's
 * own endpoint with HTTP Basic credentials (the destination's username and password; Databricks
 * sends no signature). Ids are accepted as strings or numbers (the docs show both). The
 * idempotency key is `workspace:run:event_type[:task_key]`: a notification delivered twice is
 * stored once.
 *
 * Outbound: the `databricks.runs.submit` tool runs a notebook as a one-time run through the Jobs
 * API 2.1 (`POST /api/2.1/jobs/runs/submit`, with an `idempotency_token` from the request, so a
 * redelivered request does not start a second run), polls `GET /api/2.1/jobs/runs/get` and posts
 * each life-cycle change as a status message, and returns the result state with the notebook's
 * output (`runs/get-output` of the task run).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import * as z from 'zod';
import { type Bridge, RetryLater } from '../bridge.js';
import { ClientCredentials } from '../oauth.js';

const Id = z.union([z.string().min(1).max(64), z.number().int().nonnegative()]).transform(String);

/** A job notification as Databricks posts it. */
export const JobNotification = z.object({
  event_type: z.string().regex(/^jobs\.[a-z_]+$/),
  workspace_id: Id,
  run: z.object({ run_id: Id, parent_run_id: Id.optional() }),
  job: z.object({ job_id: Id, name: z.string().max(500).optional() }),
  task: z.object({ task_key: z.string().max(100) }).optional(),
});
export type JobNotification = z.infer<typeof JobNotification>;

const TERMINAL = new Set(['TERMINATED', 'SKIPPED', 'INTERNAL_ERROR']);

/** Options of {@link attachDatabricks}. */
export interface AttachDatabricksOptions {
  /** The notification endpoint path. @default /databricks/notifications */
  path?: string;
  /** The destination's Basic credentials. */
  webhookUser: string;
  webhookPassword: string;
  /** The workspace, for the Jobs API. */
  jobs?: {
    host: string;
    /** A personal access token, or OAuth M2M credentials (`<host>/oidc/v1/token`). */
    token?: string;
    clientId?: string;
    clientSecret?: string;
    /** The cluster runs go to (else the task must say). */
    existingClusterId?: string;
    /** Between two `runs/get`. @default 1000 */
    pollMs?: number;
    /** Longest a run may take before the tool gives up. @default 3600000 */
    timeoutMs?: number;
  };
}

function sameSecret(a: string, b: string): boolean {
  const x = createHash('sha256').update(a).digest();
  const y = createHash('sha256').update(b).digest();
  return timingSafeEqual(x, y);
}

/** Registers the notification endpoint on `app` and the Jobs API tool on `bridge`. */
export function attachDatabricks(bridge: Bridge, app: FastifyInstance, o: AttachDatabricksOptions): void {
  const path = o.path ?? '/databricks/notifications';
  void app.register(async (scope) => {
    scope.post(path, async (req, reply) => {
      const basic = /^Basic\s+(\S+)$/i.exec(req.headers.authorization ?? '')?.[1];
      if (!basic) {
        bridge.refuse('unsigned', { message: 'no credentials on the notification' });
        return reply
          .code(401)
          .header('www-authenticate', 'Basic realm="parley-databricks"')
          .send({ error: 'unauthenticated' });
      }
      const decoded = Buffer.from(basic, 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      const ok =
        colon > 0 &&
        sameSecret(decoded.slice(0, colon), o.webhookUser) &&
        sameSecret(decoded.slice(colon + 1), o.webhookPassword);
      if (!ok) {
        bridge.refuse('unauthenticated', { message: 'wrong notification credentials' });
        return reply.code(401).send({ error: 'unauthenticated' });
      }
      const parsed = JobNotification.safeParse(req.body);
      if (!parsed.success) {
        bridge.refuse('malformed', {
          message: `not a job notification: ${parsed.error.issues.map((i) => i.path.join('.')).join(', ')}`,
        });
        return reply.code(400).send({ error: 'malformed' });
      }
      const n = parsed.data;
      try {
        await bridge.ingest({
          id: [n.workspace_id, n.run.run_id, n.event_type, n.task?.task_key].filter(Boolean).join(':'),
          type: n.event_type,
          payload: n,
        });
      } catch (err) {
        if (err instanceof RetryLater)
          return reply.code(503).header('retry-after', '5').send({ error: 'unavailable' });
        throw err;
      }
      return reply.code(200).send({ ok: true });
    });
  });

  if (o.jobs) {
    const jobs = o.jobs;
    const oauth =
      jobs.clientId && jobs.clientSecret
        ? new ClientCredentials({
            tokenUrl: new URL('/oidc/v1/token', jobs.host).toString(),
            clientId: jobs.clientId,
            clientSecret: jobs.clientSecret,
            scope: 'all-apis',
          })
        : undefined;
    const call = async (method: 'GET' | 'POST', path: string, body?: unknown) => {
      const token = oauth ? await oauth.token() : jobs.token;
      const res = await fetch(new URL(path, jobs.host), {
        method,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        signal: AbortSignal.timeout(30_000),
      });
      const json = (await res.json().catch(() => ({}))) as Record<string, unknown>;
      if (res.status === 401) oauth?.invalidate();
      if (!res.ok)
        throw new Error(
          `Jobs API ${path}: ${res.status} ${String(json.error_code ?? '')} ${String(json.message ?? '')}`.trim(),
        );
      return json;
    };
    bridge.tool('databricks.runs.submit', async (args, ctx) => {
      const notebook = String(args.notebook ?? '');
      if (!notebook.startsWith('/'))
        throw new Error('notebook must be a workspace path (/Repos/… or /Workspace/…)');
      const params = Object.fromEntries(
        Object.entries(args)
          .filter(([k]) => k !== 'notebook' && k !== 'run_name')
          .map(([k, v]) => [k, String(v)]),
      );
      const runName = String(args.run_name ?? `parley ${notebook.split('/').pop()}`);
      // One request, one run: a redelivered request reuses the token and gets the same run back.
      const idem = createHash('sha256')
        .update(`${ctx.room}|${notebook}|${JSON.stringify(params)}|${ctx.requestId}`)
        .digest('hex');
      const submitted = await call('POST', '/api/2.1/jobs/runs/submit', {
        run_name: runName,
        idempotency_token: idem.slice(0, 64),
        tasks: [
          {
            task_key: 'parley',
            notebook_task: { notebook_path: notebook, base_parameters: params },
            ...(jobs.existingClusterId ? { existing_cluster_id: jobs.existingClusterId } : {}),
          },
        ],
      });
      const runId = Number(submitted.run_id);
      let last = '';
      const deadline = Date.now() + (jobs.timeoutMs ?? 3_600_000);
      for (;;) {
        const run = await call('GET', `/api/2.1/jobs/runs/get?run_id=${runId}`);
        const state = (run.state ?? {}) as {
          life_cycle_state?: string;
          result_state?: string;
          state_message?: string;
        };
        const life = state.life_cycle_state ?? 'UNKNOWN';
        if (life !== last) {
          last = life;
          await ctx.progress(
            `run ${runId}: ${life}${state.state_message ? ` — ${state.state_message}` : ''}`,
          );
        }
        if (TERMINAL.has(life)) {
          const taskRun = ((run.tasks ?? []) as { run_id?: number }[])[0]?.run_id;
          let output: unknown;
          if (state.result_state === 'SUCCESS' && taskRun !== undefined) {
            const out = await call('GET', `/api/2.1/jobs/runs/get-output?run_id=${taskRun}`);
            const text = (out.notebook_output as { result?: string } | undefined)?.result;
            try {
              output = text === undefined ? undefined : JSON.parse(text);
            } catch {
              output = text;
            }
          }
          if (state.result_state !== 'SUCCESS') {
            throw new Error(
              `run ${runId} ended ${life}/${state.result_state ?? 'no result'}: ${state.state_message ?? ''}`.trim(),
            );
          }
          return { run_id: runId, result_state: state.result_state, run_page_url: run.run_page_url, output };
        }
        if (Date.now() > deadline) throw new Error(`run ${runId} still ${life} after the tool's timeout`);
        await new Promise((r) => setTimeout(r, jobs.pollMs ?? 1000));
      }
    });
  }
}
