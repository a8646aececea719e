/**
 * Outbound webhooks: an agent's inbox delivered as Standard-Webhooks-signed HTTP POSTs, which makes
 * an HTTP-only agent possible (an Apex REST endpoint, a Databricks job).
 *
 * - One worker per configured agent, on the replica holding its lease (`parley_leases`), reads the
 *   inbox with the SDK engine in pull mode on the agent's own connection and POSTs one delivery at
 *   a time, in inbox order (so in order per room); a delivery is acknowledged after a 2xx.
 * - A failure is retried with exponential backoff (the same `webhook-id` each time, so the receiver
 *   can deduplicate); after `maxAttempts` it is dead-lettered (`webhook.dlq.<agent>.<room>.<seq>`)
 *   and the agent's owner gets a notice in their inbox; the worker moves on.
 * - `replayWebhook` POSTs a room's messages after a position again, from the room log.
 * - SSRF: the URL's host is resolved and every address checked; private, loopback, link-local,
 *   unique-local, multicast and unspecified addresses are refused unless the operator allowed that
 *   host or address (`PARLEY_WEBHOOK_ALLOW_PRIVATE`). The connection goes to the address that was
 *   checked (no second lookup a DNS rebinding could change), and redirects are not followed.
 */
import { lookup } from 'node:dns/promises';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { BlockList, isIP } from 'node:net';
import type { JetStreamClient } from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  buckets,
  gatewayApi,
  gatewayKeys,
  ParleyError,
  type RoomMessage,
  registryApi,
  request,
  roomsApi,
  serviceId,
  WebhookDeadLetter,
  WebhookRecord,
} from '@parley/contracts';
import { type ApiBinding, bind, type Logger, snapshotKv, watchKv } from '@parley/kit';
import { deliveryEventOf, type PulledDelivery } from '@parley/sdk';
import { Webhook } from 'standardwebhooks';
import type { GatewayConfig } from './config.js';
import type { PrincipalPool } from './pool.js';
import { mintWebhookSecret } from './secrets.js';

const SELF = serviceId('gateway');

/** Address ranges no webhook may reach unless allowed. */
const PRIVATE = (() => {
  const b = new BlockList();
  for (const [net, bits] of [
    ['0.0.0.0', 8],
    ['10.0.0.0', 8],
    ['100.64.0.0', 10],
    ['127.0.0.0', 8],
    ['169.254.0.0', 16],
    ['172.16.0.0', 12],
    ['192.0.0.0', 24],
    ['192.168.0.0', 16],
    ['198.18.0.0', 15],
    ['224.0.0.0', 4],
    ['240.0.0.0', 4],
  ] as const) {
    b.addSubnet(net, bits, 'ipv4');
  }
  for (const [net, bits] of [
    ['::', 128],
    ['::1', 128],
    ['fc00::', 7],
    ['fe80::', 10],
    ['ff00::', 8],
  ] as const) {
    b.addSubnet(net, bits, 'ipv6');
  }
  return b;
})();

/** True when an address is private, loopback or otherwise not on the public internet. */
export function isPrivateAddress(address: string): boolean {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  if (mapped) return PRIVATE.check(mapped, 'ipv4');
  const family = isIP(address);
  return family === 4 ? PRIVATE.check(address, 'ipv4') : family === 6 ? PRIVATE.check(address, 'ipv6') : true;
}

/** Resolves a webhook URL's host to the one address to connect to, refusing private ones unless allowed. */
export async function resolveTarget(
  url: URL,
  allowed: ReadonlySet<string>,
  what = 'webhook',
): Promise<{ address: string; family: 4 | 6 }> {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const addresses = isIP(host)
    ? [{ address: host, family: isIP(host) as 4 | 6 }]
    : ((await lookup(host, { all: true }).catch(() => [])) as { address: string; family: 4 | 6 }[]);
  if (!addresses.length)
    throw new ParleyError('INVALID_ARGUMENT', `the ${what} host ${host} does not resolve`);
  for (const a of addresses) {
    if (isPrivateAddress(a.address) && !allowed.has(host.toLowerCase()) && !allowed.has(a.address)) {
      throw new ParleyError(
        'PERMISSION_DENIED',
        `the ${what} URL resolves to a private or loopback address (${a.address}); an operator can allow it with PARLEY_WEBHOOK_ALLOW_PRIVATE`,
        { details: { host, address: a.address } },
      );
    }
  }
  return addresses[0] as { address: string; family: 4 | 6 };
}

/** POSTs `body` to `url`, connecting to the checked address; resolves with the status. */
export async function postTo(
  url: URL,
  body: string,
  headers: Record<string, string>,
  allowed: ReadonlySet<string>,
  timeoutMs = 15_000,
  what = 'webhook',
): Promise<number> {
  const target = await resolveTarget(url, allowed, what);
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = send(
      url,
      {
        method: 'POST',
        headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
        timeout: timeoutMs,
        // The address checked above, not a second lookup.
        lookup: (_h, opts, cb) => {
          if ((opts as { all?: boolean }).all) {
            (cb as unknown as (e: null, a: { address: string; family: number }[]) => void)(null, [target]);
          } else cb(null, target.address, target.family);
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}

/** What {@link createOutbound} needs. */
export interface OutboundDeps {
  nc: NatsConnection;
  kv: () => KV;
  pool: PrincipalPool;
  log: Logger;
  config: GatewayConfig;
  js: JetStreamClient;
}

interface Worker {
  stop(): Promise<void>;
  url: string;
}

/** The body POSTed for one delivery. */
function payloadOf(
  agent: string,
  d: { event: string; room: string; roomSeq: number; message: RoomMessage; redelivered?: boolean },
) {
  return JSON.stringify({
    type: 'parley.delivery',
    agent,
    event: d.event,
    room: d.room,
    roomSeq: d.roomSeq,
    message: d.message,
    redelivered: d.redelivered ?? false,
  });
}

/** Outbound webhooks; see the module comment. */
export function createOutbound(deps: OutboundDeps) {
  const log = deps.log.child({ component: 'gateway-webhooks' });
  const allowed = new Set(
    deps.config.PARLEY_WEBHOOK_ALLOW_PRIVATE.split(',')
      .map((h) => h.trim().toLowerCase())
      .filter(Boolean),
  );
  const baseMs = deps.config.PARLEY_WEBHOOK_BACKOFF_MS;
  const workers = new Map<string, Worker>();
  const replica = `gw-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  let leases: KV | undefined;
  let stopWatch: (() => void) | undefined;
  let stopped = false;

  async function deliverOnce(record: WebhookRecord, id: string, body: string): Promise<void> {
    const status = await postTo(
      new URL(record.url),
      body,
      {
        'content-type': 'application/json',
        'user-agent': 'Parley-Webhooks/0.1',
        'webhook-id': id,
        'webhook-timestamp': String(Math.floor(Date.now() / 1000)),
        'webhook-signature': new Webhook(record.secret).sign(id, new Date(), body),
      },
      allowed,
    );
    if (status < 200 || status > 299) throw new Error(`HTTP ${status}`);
  }

  /** Tries up to maxAttempts with backoff; resolves with the last error, or undefined on success. */
  async function deliver(
    record: WebhookRecord,
    id: string,
    body: string,
    alive: () => boolean,
  ): Promise<{ error?: string; attempts: number }> {
    let attempt = 0;
    for (;;) {
      attempt++;
      try {
        await deliverOnce(record, id, body);
        return { attempts: attempt };
      } catch (err) {
        const error = (err as Error).message.slice(0, 300);
        if (attempt >= record.maxAttempts || !alive()) return { error, attempts: attempt };
        log.debug({ agent: record.agent, id, attempt, error }, 'webhook delivery failed; retrying');
        await new Promise((r) => setTimeout(r, Math.min(baseMs * 2 ** (attempt - 1), 60_000)));
      }
    }
  }

  async function deadLetter(record: WebhookRecord, d: PulledDelivery, attempts: number, error: string) {
    const dl = WebhookDeadLetter.parse({
      agent: record.agent,
      room: d.room,
      roomSeq: d.roomSeq,
      messageId: d.message.id,
      attempts,
      lastError: error,
      at: new Date().toISOString(),
    });
    await deps.kv().put(gatewayKeys.deadLetter(record.agent, d.room, d.roomSeq), JSON.stringify(dl));
    log.warn(
      { agent: record.agent, room: d.room, roomSeq: d.roomSeq, error },
      'webhook delivery dead-lettered',
    );
    try {
      const info = await request(deps.nc, SELF, registryApi.describeParticipant, {
        participant: record.agent,
      });
      const to = info.owner ?? record.createdBy;
      await request(deps.nc, SELF, roomsApi.notify, {
        to,
        text: `The webhook of ${record.agent} gave up on message ${d.message.id} (room ${d.room}, position ${d.roomSeq}) after ${attempts} tries: ${error}. Replay it with: parley webhook replay --agent ${record.agent} --room ${d.room} --after ${d.roomSeq - 1}`,
        data: { event: 'webhook_dead_letter', ...dl },
        key: `webhook-dlq:${record.agent}:${d.room}:${d.roomSeq}`,
      });
    } catch (err) {
      log.warn(
        { err, agent: record.agent },
        'could not notify the owner of a dead-lettered webhook delivery',
      );
    }
  }

  /** Runs one agent's worker while this replica holds its lease. */
  function startWorker(record: WebhookRecord): Worker {
    const stop = new AbortController();
    const leaseKey = `gateway-webhook.${record.agent}`;
    let revision = 0;
    const alive = () => !stop.signal.aborted;
    const done = (async () => {
      const ttl = Math.max(1000, (await leases?.status())?.ttl ?? 6000);
      while (alive()) {
        // Take the lease (or wait for it): two replicas pulling one inbox would break the order.
        try {
          if (revision) revision = (await leases?.update(leaseKey, replica, revision)) ?? 0;
          else revision = (await leases?.create(leaseKey, replica)) ?? 0;
        } catch {
          revision = 0;
          await new Promise((r) => setTimeout(r, ttl / 3));
          continue;
        }
        const renew = setInterval(async () => {
          try {
            revision = (await leases?.update(leaseKey, replica, revision)) ?? 0;
          } catch {
            revision = 0;
            stop.abort();
          }
        }, ttl / 3);
        const held = await deps.pool.acquire(record.agent);
        try {
          while (alive() && revision) {
            const batch = await held.agent.pull({ max: 20, signal: stop.signal });
            let ok = true;
            for (const d of batch.deliveries) {
              const r = await deliver(record, d.message.id, payloadOf(record.agent, d), alive);
              if (r.error !== undefined && !alive()) {
                ok = false;
                break;
              }
              if (r.error !== undefined) await deadLetter(record, d, r.attempts, r.error);
            }
            if (ok) await batch.ack();
            else batch.release();
          }
        } catch (err) {
          if (alive()) log.warn({ err, agent: record.agent }, 'webhook worker failed; restarting');
        } finally {
          clearInterval(renew);
          held.release();
          await deps.pool.retire(record.agent);
        }
      }
      if (revision) await leases?.delete(leaseKey, { previousSeq: revision }).catch(() => undefined);
    })();
    return {
      url: record.url,
      async stop() {
        stop.abort();
        await done;
      },
    };
  }

  async function apply(agent: string, record: WebhookRecord | undefined): Promise<void> {
    const running = workers.get(agent);
    if (running && record && running.url === record.url) return;
    if (running) {
      workers.delete(agent);
      await running.stop();
    }
    if (record && !stopped) workers.set(agent, startWorker(record));
  }

  async function readRecord(agent: string): Promise<WebhookRecord | undefined> {
    const e = await deps.kv().get(gatewayKeys.webhook(agent));
    return e?.operation === 'PUT' ? WebhookRecord.parse(e.json()) : undefined;
  }

  return {
    /** The `gateway.*Webhook` API methods. */
    bindings(
      checkManage: (caller: string, agent: string) => Promise<void>,
      audit: (action: string, actor: string, target: string, data: Record<string, unknown>) => Promise<void>,
    ): ApiBinding[] {
      return [
        bind(gatewayApi.setWebhook, async (req, ctx) => {
          await checkManage(ctx.caller, req.agent);
          await resolveTarget(new URL(req.url), allowed);
          const record = WebhookRecord.parse({
            agent: req.agent,
            url: req.url,
            maxAttempts: req.maxAttempts,
            createdBy: ctx.caller,
            createdAt: new Date().toISOString(),
            secret: mintWebhookSecret(),
          });
          await deps.kv().put(gatewayKeys.webhook(req.agent), JSON.stringify(record));
          await audit('webhook.set', ctx.caller, req.agent, { url: req.url });
          const { secret, ...info } = record;
          return { info, secret };
        }),
        bind(gatewayApi.getWebhook, async (req, ctx) => {
          await checkManage(ctx.caller, req.agent);
          const record = await readRecord(req.agent);
          if (!record) throw new ParleyError('NOT_FOUND', `${req.agent} has no webhook`);
          const dls = await snapshotKv(deps.kv(), `webhook.dlq.${req.agent}.>`);
          const { secret: _, ...info } = record;
          return {
            info,
            deadLetters: [...dls.values()]
              .map((e) => WebhookDeadLetter.parse(e.json()))
              .sort((a, b) => a.at.localeCompare(b.at)),
          };
        }),
        bind(gatewayApi.deleteWebhook, async (req, ctx) => {
          await checkManage(ctx.caller, req.agent);
          if (!(await readRecord(req.agent))) return { deleted: false };
          await deps.kv().delete(gatewayKeys.webhook(req.agent));
          await audit('webhook.delete', ctx.caller, req.agent, {});
          return { deleted: true };
        }),
        bind(gatewayApi.replayWebhook, async (req, ctx) => {
          await checkManage(ctx.caller, req.agent);
          const record = await readRecord(req.agent);
          if (!record) throw new ParleyError('NOT_FOUND', `${req.agent} has no webhook`);
          const held = await deps.pool.acquire(req.agent);
          let delivered = 0;
          try {
            let after = req.after;
            for (;;) {
              const page = await held.agent.call(roomsApi.history, {
                room: req.room,
                order: 'oldest',
                after,
                limit: 200,
              });
              for (const e of page.entries) {
                after = e.seq;
                if (e.message.kind === 'message' && e.message.sender.id === req.agent) continue;
                const body = payloadOf(req.agent, {
                  event: deliveryEventOf(e.message),
                  room: req.room,
                  roomSeq: e.seq,
                  message: e.message,
                  redelivered: true,
                });
                const r = await deliver(record, e.message.id, body, () => true);
                if (r.error !== undefined) {
                  throw new ParleyError(
                    'UNAVAILABLE',
                    `the webhook refused the replay at ${req.room}:${e.seq}: ${r.error}`,
                    {
                      details: { delivered },
                    },
                  );
                }
                delivered++;
              }
              if (!page.more) break;
            }
          } finally {
            held.release();
          }
          return { delivered };
        }),
      ];
    },

    async start() {
      leases = await new Kvm(deps.nc).open(buckets.leases);
      const watch = await watchKv(deps.kv(), {
        key: gatewayKeys.webhook('*'),
        onEntry: (e) => {
          const agent = e.key.slice('webhook.'.length);
          void apply(agent, e.operation === 'PUT' ? WebhookRecord.parse(e.json()) : undefined);
        },
        onError: (err) => log.warn({ err }, 'webhook watch failed'),
        log,
      });
      stopWatch = () => watch.stop();
    },

    async stop() {
      stopped = true;
      stopWatch?.();
      await Promise.allSettled([...workers.values()].map((w) => w.stop()));
      workers.clear();
    },

    /** Agents whose webhook worker runs here (tests, metrics). */
    running(): string[] {
      return [...workers.keys()];
    },
  };
}

/** The outbound webhooks' API. */
export type Outbound = ReturnType<typeof createOutbound>;
