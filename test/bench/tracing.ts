/**
 * What tracing costs `request()` (and serveApis on the other side): tracing off (nothing
 * registered), propagate (no endpoint: context manager and W3C propagators only), and on (100%
 * sampling, every span exported over OTLP/HTTP protobuf to a receiver in another process).
 *
 * 1. CPU only: request() against an in-memory requester that answers at once, so the figure is the
 *    instrumentation itself (client span, header injection), in µs per call.
 * 2. End to end on a real nats-server: sequential calls (latency) and 64 in flight (throughput),
 *    client and server span per call.
 *
 * Modes are interleaved over rounds and medians reported. Run: pnpm --filter @parley/test bench:tracing
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import { decodeReply, defineApi, encodeJson, newId, request } from '@parley/contracts';
import {
  bind,
  createMicroService,
  loadTelemetryConfig,
  serveApis,
  silentLogger,
  startTelemetry,
  type Telemetry,
} from '@parley/kit';
import * as z from 'zod';
import { startServer } from '../harness/index.js';

const ping = defineApi({
  service: 'bench',
  method: 'ping',
  summary: 'answers at once',
  access: 'participant',
  request: z.object({ text: z.string() }),
  response: z.object({ text: z.string() }),
});
type Mode = 'off' | 'propagate' | 'on';
const MODES: Mode[] = ['off', 'propagate', 'on'];
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CPU_CALLS = Number(process.env.BENCH_CPU_CALLS ?? 100_000);
const SEQ_CALLS = Number(process.env.BENCH_SEQ_CALLS ?? 2_000);
const PAR_CALLS = Number(process.env.BENCH_PAR_CALLS ?? 10_000);
const IN_FLIGHT = 64;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) * p)] ?? 0;

async function withMode<T>(mode: Mode, receiverUrl: string, fn: (t: Telemetry | undefined) => Promise<T>) {
  if (mode === 'off') return fn(undefined);
  const t = await startTelemetry({
    config: loadTelemetryConfig(mode === 'on' ? { OTEL_EXPORTER_OTLP_ENDPOINT: receiverUrl } : {}),
    serviceName: 'parley-bench',
    log: silentLogger(),
  });
  try {
    return await fn(t);
  } finally {
    await t.shutdown();
  }
}

async function cpuOnly(): Promise<number> {
  const reply = { data: encodeJson({ text: 'pong' }), headers: natsHeaders() };
  let sawHeaders = 0;
  const requester = {
    request: async (_s: string, _p?: Uint8Array, o?: { headers?: unknown }) => {
      if (o?.headers) sawHeaders++;
      return reply;
    },
  };
  const caller = newId('agent');
  for (let i = 0; i < 5_000; i++) await request(requester, caller, ping, { text: 'ping' });
  const t0 = performance.now();
  for (let i = 0; i < CPU_CALLS; i++) await request(requester, caller, ping, { text: 'ping' });
  const us = ((performance.now() - t0) * 1000) / CPU_CALLS;
  if (sawHeaders === 0 && process.env.BENCH_DEBUG) console.error('no headers sent');
  return us;
}

/** What request() did before tracing: encode, nc.request, decode. */
async function cpuBaseline(): Promise<number> {
  const reply = { data: encodeJson({ text: 'pong' }), headers: natsHeaders() };
  const requester = { request: async () => reply };
  const caller = newId('agent');
  const call = async () => {
    const r = await requester.request();
    encodeJson({ text: 'ping' });
    ping.subject(caller);
    return decodeReply(ping.response, r);
  };
  for (let i = 0; i < 5_000; i++) await call();
  const t0 = performance.now();
  for (let i = 0; i < CPU_CALLS; i++) await call();
  return ((performance.now() - t0) * 1000) / CPU_CALLS;
}

/** The caller of the end-to-end calls: services answer only to its own reply prefix. */
const BENCH_CALLER = newId('agent');

async function endToEnd(nc: NatsConnection, server: NatsConnection, t: Telemetry | undefined) {
  const micro = createMicroService(server, { name: 'parley-bench', version: '1' });
  serveApis(micro, [bind(ping, async (req) => ({ text: req.text }))], {
    service: 'bench',
    standing: 'unchecked',
    queue: 'bench',
    log: silentLogger(),
    ...(t ? { tracer: t.tracer('bench') } : {}),
  });
  await server.flush();
  const caller = BENCH_CALLER;
  for (let i = 0; i < 500; i++) await request(nc, caller, ping, { text: 'w' });
  const lat: number[] = [];
  for (let i = 0; i < SEQ_CALLS; i++) {
    const s = performance.now();
    await request(nc, caller, ping, { text: 'x' });
    lat.push(performance.now() - s);
  }
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (next++ < PAR_CALLS) await request(nc, caller, ping, { text: 'y' });
    }),
  );
  const perSec = PAR_CALLS / ((performance.now() - t0) / 1000);
  await micro.stop();
  return { p50: pct(lat, 0.5), p99: pct(lat, 0.99), perSec };
}

// The receiver runs in its own process, as a collector would: its decoding must not be billed to
// the traced process.
const receiverProc = spawn(
  process.execPath,
  [
    '--conditions=@parley/source',
    '--import',
    'tsx',
    fileURLToPath(new URL('./otlp-receiver-process.ts', import.meta.url)),
  ],
  { stdio: ['ignore', 'pipe', 'inherit'] },
);
const [firstLine] = (await once(receiverProc.stdout, 'data')) as [Buffer];
const receiver = { url: firstLine.toString().trim() };
const natsServer = await startServer();
const nc = await natsServer.connect({ inboxPrefix: `_INBOX.${BENCH_CALLER}` });
const srv = await natsServer.connect();
const cpu: Record<Mode | 'baseline', number[]> = { baseline: [], off: [], propagate: [], on: [] };
const e2e: Record<Mode, { p50: number[]; p99: number[]; perSec: number[] }> = {
  off: { p50: [], p99: [], perSec: [] },
  propagate: { p50: [], p99: [], perSec: [] },
  on: { p50: [], p99: [], perSec: [] },
};
try {
  // Warm-up: every code path JIT-compiled before anything is measured.
  for (const mode of MODES) await withMode(mode, receiver.url, () => cpuOnly());
  for (let round = 0; round < ROUNDS; round++) {
    cpu.baseline.push(await cpuBaseline());
    for (const mode of MODES) {
      await withMode(mode, receiver.url, async (t) => {
        cpu[mode].push(await cpuOnly());
        const r = await endToEnd(nc, srv, t);
        e2e[mode].p50.push(r.p50);
        e2e[mode].p99.push(r.p99);
        e2e[mode].perSec.push(r.perSec);
      });
    }
    process.stderr.write(`round ${round + 1}/${ROUNDS} done\n`);
  }
  const base = median(cpu.off);
  console.log(`request() instrumentation, CPU only (${CPU_CALLS} calls, median of ${ROUNDS} rounds):`);
  console.log(`  before tracing (encode + request + decode): ${median(cpu.baseline).toFixed(2)} µs/call`);
  for (const m of MODES)
    console.log(
      `  ${m.padEnd(9)} ${median(cpu[m]).toFixed(2)} µs/call  (+${(median(cpu[m]) - median(cpu.baseline)).toFixed(2)} µs vs before, ×${(median(cpu[m]) / base).toFixed(2)} vs off)`,
    );
  const offRate = median(e2e.off.perSec);
  console.log(
    `\nrequest() → serveApis on nats-server (${SEQ_CALLS} sequential, ${PAR_CALLS} with ${IN_FLIGHT} in flight):`,
  );
  for (const m of MODES)
    console.log(
      `  ${m.padEnd(9)} p50 ${median(e2e[m].p50).toFixed(3)} ms  p99 ${median(e2e[m].p99).toFixed(3)} ms  ${Math.round(median(e2e[m].perSec))} req/s (${((median(e2e[m].perSec) / offRate) * 100).toFixed(0)}% of off)`,
    );
} finally {
  await nc.close();
  await srv.close();
  await natsServer.stop();
  receiverProc.kill('SIGTERM');
  const [last] = (await once(receiverProc.stdout, 'data')) as [Buffer];
  console.log(`\nOTLP receiver (own process): ${last.toString().trim()} received`);
}
