/**
 * What the A2A bridge keeps (KV bucket `parley_gateway`), so that every replica serves every task:
 * the task records of the A2A tasks it serves (`a2a.task.<caller>.<taskId>`, the A2A state machine
 * as the SDK runs it), the direct room an A2A `contextId` stands for
 * (`a2a.ctx.<caller>.<agent>.<contextId>`), and push-notification configs
 * (`a2a.push.<caller>.<taskId>.<configId>`, the SSRF check of outbound webhooks when set). Push
 * notifications go out from the replica running the task, through the outbound webhooks' pinned
 * POST (the address checked is the address connected to).
 *
 * A minimal task record of our own: Parley has no tasks API yet (issue 19). When it has, the
 * records move there and this store reads them.
 */
import { createHash, randomUUID } from 'node:crypto';
import {
  type ListTasksResponse,
  type StreamResponse,
  Task,
  TaskPushNotificationConfig,
  TaskState,
} from '@a2a-js/sdk';
import { V03PushNotificationSerializer } from '@a2a-js/sdk/compat/v0_3/server';
import { RequestMalformedError } from '@a2a-js/sdk/errors';
import {
  type PushNotificationSender,
  type PushNotificationSerializer,
  type PushNotificationStore,
  type ServerCallContext,
  type StoredPushNotificationConfig,
  type TaskStore,
  V1PushNotificationSerializer,
} from '@a2a-js/sdk/server';
import type { KV } from '@nats-io/kv';
import { ParleyError } from '@parley/contracts';
import { type Logger, snapshotKv, watchKv } from '@parley/kit';
import { postTo, resolveTarget } from '../outbound.js';

/** A KV key token for any string (A2A ids are client-chosen: hashed unless already safe). */
export function keyToken(s: string): string {
  return /^[A-Za-z0-9_-]{1,64}$/.test(s) ? s : createHash('sha256').update(s).digest('hex').slice(0, 40);
}

/** The participant an A2A call acts for (the SDK's user name, set by the gateway's authentication). */
export function callerOf(context: ServerCallContext): string {
  const user = context.user;
  if (!user?.isAuthenticated) throw new RequestMalformedError('the A2A call is not authenticated');
  return user.userName;
}

/** KV keys of the bridge. */
export const a2aKeys = {
  task: (caller: string, taskId: string) => `a2a.task.${keyToken(caller)}.${keyToken(taskId)}`,
  context: (caller: string, agent: string, contextId: string) =>
    `a2a.ctx.${keyToken(caller)}.${keyToken(agent)}.${keyToken(contextId)}`,
  push: (caller: string, taskId: string, configId: string) =>
    `a2a.push.${keyToken(caller)}.${keyToken(taskId)}.${keyToken(configId)}`,
};

/** Task records in KV, scoped to the caller: another principal's task is not found. */
export function createKvTaskStore(kv: () => KV): TaskStore {
  return {
    async save(task, context) {
      await kv().put(a2aKeys.task(callerOf(context), task.id), JSON.stringify(Task.toJSON(task)));
    },
    async load(taskId, context) {
      const e = await kv().get(a2aKeys.task(callerOf(context), taskId));
      return e?.operation === 'PUT' ? Task.fromJSON(e.json()) : undefined;
    },
    async list(params, context): Promise<ListTasksResponse> {
      const all = await snapshotKv(kv(), `a2a.task.${keyToken(callerOf(context))}.*`);
      const after = params.statusTimestampAfter ? Date.parse(params.statusTimestampAfter) : undefined;
      const tasks = [...all.values()]
        .map((e) => Task.fromJSON(e.json()))
        .filter((t) => !params.contextId || t.contextId === params.contextId)
        .filter(
          (t) => params.status === TaskState.TASK_STATE_UNSPECIFIED || t.status?.state === params.status,
        )
        .filter((t) => after === undefined || Date.parse(t.status?.timestamp ?? '') > after)
        .sort((a, b) => (b.status?.timestamp ?? '').localeCompare(a.status?.timestamp ?? ''));
      const pageSize = Math.min(Math.max(params.pageSize ?? 50, 1), 100);
      const start = params.pageToken ? Number.parseInt(params.pageToken, 10) || 0 : 0;
      const page = tasks.slice(start, start + pageSize).map((t) => ({
        ...t,
        history:
          params.historyLength === undefined
            ? t.history
            : t.history.slice(-params.historyLength || t.history.length),
        artifacts: params.includeArtifacts === false ? [] : t.artifacts,
      }));
      return {
        tasks: page,
        nextPageToken: start + pageSize < tasks.length ? String(start + pageSize) : '',
        pageSize,
        totalSize: tasks.length,
      };
    },
  };
}

/**
 * Refuses an outbound URL (remote card, its JWKS, a remote endpoint, a push target) that is not
 * http(s) or whose host resolves to a private or loopback address, unless an operator allowed it
 * (PARLEY_WEBHOOK_ALLOW_PRIVATE) — the outbound webhooks' SSRF guard.
 */
export async function checkOutboundUrl(raw: string, allowed: ReadonlySet<string>): Promise<URL> {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ParleyError('INVALID_ARGUMENT', `the URL is not a URL: ${raw.slice(0, 200)}`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw new ParleyError('INVALID_ARGUMENT', 'the URL must be http or https');
  }
  await resolveTarget(url, allowed, 'A2A');
  return url;
}

const StoredPush = (v: unknown): StoredPushNotificationConfig => {
  const o = v as { config: unknown; wireVersion: string };
  return { config: TaskPushNotificationConfig.fromJSON(o.config), wireVersion: o.wireVersion };
};

/**
 * Push-notification configs in KV, per caller (any replica lists, gets and deletes them; the one
 * running the task delivers), with the SSRF check at the time a config is set.
 */
export function createPushStore(kv: () => KV, allowed: ReadonlySet<string>): PushNotificationStore {
  const all = async (taskId: string, context: ServerCallContext) =>
    [...(await snapshotKv(kv(), `a2a.push.${keyToken(callerOf(context))}.${keyToken(taskId)}.*`)).values()]
      .map((e) => StoredPush(e.json()))
      .sort((a, b) => a.config.id.localeCompare(b.config.id));
  return {
    async save(taskId: string, context: ServerCallContext, config: TaskPushNotificationConfig) {
      // A refused target is the caller's bad parameter (-32602), with the reason.
      await checkOutboundUrl(config.url, allowed).catch((err: Error) => {
        throw new RequestMalformedError(err.message);
      });
      // The id is the result of Create (the SDK reads it back from the same object).
      if (!config.id) config.id = randomUUID();
      await kv().put(
        a2aKeys.push(callerOf(context), taskId, config.id),
        JSON.stringify({
          config: TaskPushNotificationConfig.toJSON(config),
          wireVersion: context.requestedVersion || '0.3',
        }),
      );
    },
    load: async (taskId, context) => (await all(taskId, context)).map((s) => s.config),
    loadWithMetadata: all,
    async delete(taskId, context, configId) {
      const ids = configId ? [configId] : (await all(taskId, context)).map((s) => s.config.id);
      for (const id of ids) await kv().delete(a2aKeys.push(callerOf(context), taskId, id));
    },
  };
}

/**
 * Every replica's view of the push configs (`a2a.push.>`, watched): the sender looks configs up
 * here for every task event without a KV read; create, list, get and delete read KV itself.
 */
export async function watchPushConfigs(kv: KV, log: Logger) {
  const byTask = new Map<string, Map<string, StoredPushNotificationConfig>>();
  const watch = await watchKv(kv, {
    key: 'a2a.push.>',
    onEntry: (e) => {
      const [, , caller, task, id] = e.key.split('.');
      const k = `${caller}.${task}`;
      const configs = byTask.get(k) ?? new Map<string, StoredPushNotificationConfig>();
      if (e.operation === 'PUT') configs.set(id as string, StoredPush(e.json()));
      else configs.delete(id as string);
      if (configs.size) byTask.set(k, configs);
      else byTask.delete(k);
    },
    onError: (err) => log.warn({ err }, 'A2A push config watch failed'),
  });
  await watch.initialized;
  return {
    configs: (caller: string, taskId: string): StoredPushNotificationConfig[] => [
      ...(byTask.get(`${keyToken(caller)}.${keyToken(taskId)}`)?.values() ?? []),
    ],
    stop: () => watch.stop(),
  };
}

/**
 * Sends push notifications as the SDK's default sender does (same bodies per wire version, same
 * auth headers, in order per task), but through the outbound webhooks' POST: the host is resolved
 * and checked again at send time and the connection goes to that address (no DNS rebinding between
 * the check and the send), redirects are not followed.
 */
export function createPushSender(
  index: Pick<Awaited<ReturnType<typeof watchPushConfigs>>, 'configs'>,
  allowed: ReadonlySet<string>,
  log: Logger,
  timeoutMs = 5000,
): PushNotificationSender {
  const serializers: Record<string, PushNotificationSerializer> = {
    '1.0': new V1PushNotificationSerializer(),
    '0.3': new V03PushNotificationSerializer(),
  };
  const chains = new Map<string, Promise<void>>();
  const taskIdOf = (r: StreamResponse) =>
    r.payload?.$case === 'task' ? r.payload.value.id : (r.payload?.value.taskId ?? '');
  async function dispatch(r: StreamResponse, stored: StoredPushNotificationConfig, task?: Task) {
    const { config, wireVersion } = stored;
    const serializer = serializers[wireVersion] ?? (serializers['1.0'] as PushNotificationSerializer);
    const { body, contentType } = serializer.serialize(r, task);
    const headers: Record<string, string> = { 'content-type': contentType };
    if (config.authentication?.scheme && config.authentication.credentials) {
      headers.authorization = `${config.authentication.scheme} ${config.authentication.credentials}`;
    } else if (config.token) headers['x-a2a-notification-token'] = config.token;
    const status = await postTo(new URL(config.url), body, headers, allowed, timeoutMs, 'push');
    if (status < 200 || status >= 300) throw new Error(`the push target answered ${status}`);
  }
  return {
    send(r, context, task) {
      const taskId = taskIdOf(r);
      const configs = taskId ? index.configs(callerOf(context), taskId) : [];
      // The common case (no push config) costs a map lookup.
      if (!configs.length) return Promise.resolve();
      const next = (chains.get(taskId) ?? Promise.resolve()).then(async () => {
        await Promise.all(
          configs.map((c) =>
            dispatch(r, c, task).catch((err: unknown) =>
              log.info({ err, taskId, url: c.config.url }, 'A2A push notification not delivered'),
            ),
          ),
        );
      });
      chains.set(taskId, next);
      return next.finally(() => {
        if (chains.get(taskId) === next) chains.delete(taskId);
      });
    },
  };
}
