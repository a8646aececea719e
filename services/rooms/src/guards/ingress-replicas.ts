/**
 * How many ingress replicas are live, so each can enforce its share of a rate limit. Every replica
 * puts `ingress.<replicaId>` in `parley_leases` (entries expire after the bucket's TTL) every third
 * of the TTL and counts the `ingress.*` keys: a replica that dies stops counting after one TTL.
 * This is off the send path entirely.
 */
import type { KV } from '@nats-io/kv';
import type { Logger } from '@parley/kit';

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
  const tick = async () => {
    await o.kv.put(key, JSON.stringify({ replica: o.replicaId }));
    let live = 0;
    for await (const _ of await o.kv.keys('ingress.*')) live++;
    const next = Math.max(1, live);
    if (next !== n) {
      n = next;
      for (const l of listeners) l(n);
    }
  };
  await tick();
  let running: Promise<void> = Promise.resolve();
  const timer = setInterval(
    () => {
      running = tick().catch((err) =>
        o.log.warn({ err: (err as Error).message }, 'ingress replica count not refreshed'),
      );
    },
    Math.max(200, Math.floor(o.ttlMs / 3)),
  );
  return {
    count: () => n,
    onChange: (l) => {
      listeners.push(l);
    },
    async stop() {
      clearInterval(timer);
      await running;
      await o.kv.delete(key).catch(() => undefined);
    },
  };
}
