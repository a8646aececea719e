/**
 * How many ingress replicas are live, so each can enforce its share of a rate limit. Every replica
 * puts `ingress.<replicaId>` in `parley_leases` (entries expire after the bucket's TTL) every third
 * of the TTL and counts the `ingress.*` keys put within 1.5 TTLs (one KV watch): a replica that
 * dies stops counting after 1.5 TTLs.
 * This is off the send path entirely.
 */
import type { KV } from '@nats-io/kv';
import type { Logger } from '@parley/kit';
import { watchLiveKeys } from '../live-keys.js';

/** The live ingress replica count, kept current in the background. */
export interface IngressReplicas {
  /** Live replicas, at least 1. */
  count(): number;
  /** Called when the count changes. */
  onChange(listener: (n: number) => void): void;
  stop(): Promise<void>;
}

/** Starts announcing this replica and counting the others. */
export async function trackIngressReplicas(o: {
  kv: KV;
  replicaId: string;
  ttlMs: number;
  log: Logger;
}): Promise<IngressReplicas> {
  let n = 1;
  const listeners: ((n: number) => void)[] = [];
  const key = `ingress.${o.replicaId}`;
  const put = () => o.kv.put(key, JSON.stringify({ replica: o.replicaId }));
  await put();
  // One watch, not a listing per tick (see live-keys.ts).
  const replicas = await watchLiveKeys({ kv: o.kv, prefix: 'ingress.', ttlMs: o.ttlMs, log: o.log });
  const tick = async () => {
    const live = replicas.live();
    live.add(o.replicaId);
    const next = live.size;
    if (next !== n) {
      n = next;
      for (const l of listeners) l(n);
    }
    await put();
  };
  await tick();
  let running: Promise<void> = Promise.resolve();
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  // One tick at a time: while JetStream does not answer, puts must not pile up.
  const loop = () => {
    running = tick()
      .catch((err) => o.log.warn({ err: (err as Error).message }, 'ingress replica count not refreshed'))
      .finally(() => {
        if (!stopped) timer = setTimeout(loop, Math.max(200, Math.floor(o.ttlMs / 3)));
      });
  };
  timer = setTimeout(loop, Math.max(200, Math.floor(o.ttlMs / 3)));
  return {
    count: () => n,
    onChange: (l) => {
      listeners.push(l);
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      replicas.stop();
      await running;
      await o.kv.delete(key).catch(() => undefined);
    },
  };
}
