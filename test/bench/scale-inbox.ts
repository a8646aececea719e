/**
 * What one more inbox consumer costs nats-server per stored inbox message: the real backbone
 * (ensureBackbone) on a bare nats-server, N inbox consumers made as the registry makes them, then
 * timed JetStream publishes into one participant's inbox and timed `consumers.info`, at each N.
 * Diagnosis for `pnpm bench:scale`'s 10,000 tier; not part of `npm test`.
 *
 * `tsx --conditions=@parley/source bench/scale-inbox.ts 1000,3000,10000`
 */
import { loadavg } from 'node:os';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { inboxStream, subjects } from '@parley/contracts';
import { createLogger, ensureBackbone, inboxConsumerConfig } from '@parley/kit';
import { startServer } from '../harness/index.js';
import { cpuSeconds, percentiles, windowed } from './stats.js';

const checkpoints = (process.argv[2] ?? '1000,3000,10000').split(',').map(Number);
const server = await startServer();
const nc = await server.connect();
try {
  await ensureBackbone(nc, {}, createLogger({ name: 'scale-inbox', level: 'warn' }));
  const jsm = await jetstreamManager(nc, { timeout: 60_000 });
  const js = jetstream(nc, { timeout: 60_000 });
  const natsPid = server.pid(0) ?? 0;
  let made = 0;
  const row = (label: string, xs: number[]) => {
    const p = percentiles(xs);
    return `${label} p50 ${p.p50.toFixed(2)} p99 ${p.p99.toFixed(2)} ms`;
  };
  for (const n of checkpoints) {
    const t0 = performance.now();
    await windowed(n - made, 16, async (i) => {
      const id = `agt_PROBE${String(made + i).padStart(8, '0')}`;
      await jsm.consumers.add(inboxStream(id), inboxConsumerConfig(id));
    });
    const addS = (performance.now() - t0) / 1000;
    const added = n - made;
    made = n;
    const target = 'agt_PROBE00000000';
    const pub: number[] = [];
    const c0 = cpuSeconds(natsPid) ?? 0;
    for (let i = 0; i < 200; i++) {
      const t = performance.now();
      await js.publish(subjects.inbox(target, 'room_PROBE'), new Uint8Array(256));
      pub.push(performance.now() - t);
    }
    const cpuUs = (((cpuSeconds(natsPid) ?? 0) - c0) / 200) * 1e6;
    const info: number[] = [];
    for (let i = 0; i < 50; i++) {
      const t = performance.now();
      const id = `agt_PROBE${String(i * 7).padStart(8, '0')}`;
      await jsm.consumers.info(inboxStream(id), id);
      info.push(performance.now() - t);
    }
    console.log(
      `${n} consumers (${(added / addS).toFixed(0)}/s added) [load ${loadavg()[0]?.toFixed(1)}]: ${row('publish', pub)}, nats-server CPU ${cpuUs.toFixed(0)} µs/publish; ${row('consumers.info', info)}`,
    );
  }
} finally {
  await nc.close();
  await server.stop();
}
