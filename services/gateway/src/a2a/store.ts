/**
 * What the A2A bridge keeps (KV bucket `parley_gateway`): the task records of the A2A tasks it
 * serves (`a2a.task.<caller>.<taskId>`, the A2A state machine as the SDK runs it), the direct room
 * an A2A `contextId` stands for (`a2a.ctx.<caller>.<agent>.<contextId>`), and push-notification
 * configs with the SSRF check of outbound webhooks.
 *
 * A minimal task record of our own: Parley has no tasks API yet (issue 19). When it has, the
 * records move there and this store reads them.
 */
import { createHash } from 'node:crypto';
import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';
import { type ListTasksResponse, Task, type TaskPushNotificationConfig, TaskState } from '@a2a-js/sdk';
import { RequestMalformedError } from '@a2a-js/sdk/errors';
import {
  InMemoryPushNotificationStore,
  type PushNotificationStore,
  type ServerCallContext,
  type TaskStore,
} from '@a2a-js/sdk/server';
import type { KV } from '@nats-io/kv';
import { ParleyError } from '@parley/contracts';
import { snapshotKv } from '@parley/kit';

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

// Private, loopback, link-local, CGNAT, multicast and reserved ranges: a push target must be public.
const PRIVATE = (() => {
  const b = new BlockList();
  for (const [net, bits] of [
    ['0.0.0.0', 8],
    ['10.0.0.0', 8],
    ['100.64.0.0', 10],
    ['127.0.0.0', 8],
    ['169.254.0.0', 16],
    ['172.16.0.0', 12],
    ['192.168.0.0', 16],
    ['224.0.0.0', 4],
    ['240.0.0.0', 4],
  ] as const)
    b.addSubnet(net, bits, 'ipv4');
  for (const [net, bits] of [
    ['::', 128],
    ['::1', 128],
    ['fc00::', 7],
    ['fe80::', 10],
    ['ff00::', 8],
  ] as const)
    b.addSubnet(net, bits, 'ipv6');
  return b;
})();

/** True when an address is not on the public internet. */
export function isPrivateAddress(address: string): boolean {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  if (mapped) return PRIVATE.check(mapped, 'ipv4');
  const family = isIP(address);
  return family === 4 ? PRIVATE.check(address, 'ipv4') : family === 6 ? PRIVATE.check(address, 'ipv6') : true;
}

/**
 * Refuses an outbound URL (push target, remote card, JWKS) that is not http(s) or whose host
 * resolves to a private or loopback address, unless an operator allowed it
 * (PARLEY_WEBHOOK_ALLOW_PRIVATE, as for outbound webhooks).
 */
export async function checkOutboundUrl(raw: string, allowed: ReadonlySet<string>): Promise<void> {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ParleyError('INVALID_ARGUMENT', `the URL is not a URL: ${raw.slice(0, 200)}`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw new ParleyError('INVALID_ARGUMENT', 'the URL must be http or https');
  }
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const addresses = isIP(host)
    ? [host]
    : (await lookup(host, { all: true }).catch(() => [])).map((a) => a.address);
  if (!addresses.length) throw new ParleyError('INVALID_ARGUMENT', `the host ${host} does not resolve`);
  for (const a of addresses) {
    if (isPrivateAddress(a) && !allowed.has(host.toLowerCase()) && !allowed.has(a)) {
      throw new ParleyError(
        'PERMISSION_DENIED',
        `the URL resolves to a private or loopback address (${a}); an operator can allow it with PARLEY_WEBHOOK_ALLOW_PRIVATE`,
        { details: { host, address: a } },
      );
    }
  }
}

/** Push-notification configs, per caller, with the SSRF check at the time a config is set. */
export function createPushStore(allowed: ReadonlySet<string>): PushNotificationStore {
  const inner = new InMemoryPushNotificationStore();
  return {
    async save(taskId: string, context: ServerCallContext, config: TaskPushNotificationConfig) {
      // A refused target is the caller's bad parameter (-32602), with the reason.
      await checkOutboundUrl(config.url, allowed).catch((err: Error) => {
        throw new RequestMalformedError(err.message);
      });
      await inner.save(taskId, context, config);
    },
    load: (taskId, context) => inner.load(taskId, context),
    loadWithMetadata: (taskId, context) => inner.loadWithMetadata(taskId, context),
    delete: (taskId, context, id) => inner.delete(taskId, context, id),
  };
}
