import { readFileSync } from 'node:fs';
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import { parsePrometheusText, sampleValue } from '../harness/prometheus.js';

/** p50/p95/p99 of a list of numbers (milliseconds), rounded to 0.01. */
export function percentiles(values: number[]): { p50: number; p95: number; p99: number } {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => {
    if (sorted.length === 0) return Number.NaN;
    const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
    return Math.round((sorted[i] ?? 0) * 100) / 100;
  };
  return { p50: at(0.5), p95: at(0.95), p99: at(0.99) };
}

/** The tail of a latency distribution: p50/p99/p99.9 and the worst, rounded to 0.01 ms. */
export interface Tail {
  p50: number;
  p99: number;
  p999: number;
  max: number;
  count: number;
}

/** p50/p99/p99.9/max of a list of milliseconds. */
export function tail(values: number[]): Tail {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => {
    if (sorted.length === 0) return Number.NaN;
    const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
    return Math.round((sorted[i] ?? 0) * 100) / 100;
  };
  return { p50: at(0.5), p99: at(0.99), p999: at(0.999), max: at(1), count: sorted.length };
}

/**
 * A latency run's deliveries: only of messages sent at or after `from` (`performance.now()`), so a
 * warm-up at the run's rate is not counted; and, per half second of send time, the median and the
 * worst (`--series`).
 */
export class LatencyRecorder {
  readonly latencies: number[] = [];
  readonly #sentAt: number[] = [];
  constructor(readonly from: number) {}

  /** Records a delivery of a message sent at `sentAt`; false when it was sent in the warm-up. */
  record(sentAt: number, now = performance.now()): boolean {
    if (!(sentAt >= this.from)) return false;
    this.latencies.push(now - sentAt);
    this.#sentAt.push(sentAt);
    return true;
  }

  /** "seconds since `from`: p50/max ms" per half second, e.g. `1.5:2.1/14`. */
  series(): string {
    const windows = new Map<number, number[]>();
    for (const [i, t] of this.#sentAt.entries()) {
      const k = Math.floor((t - this.from) / 500);
      const w = windows.get(k) ?? [];
      w.push(this.latencies[i] ?? 0);
      windows.set(k, w);
    }
    return [...windows.entries()]
      .sort(([a], [b]) => a - b)
      .map(([k, w]) => {
        const t = tail(w);
        return `${(k / 2).toFixed(1)}:${t.p50}/${Math.round(t.max)}`;
      })
      .join(' ');
  }
}

/** The median of a few numbers. */
export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}

/** Peak resident set size of a process in MB (VmHWM), or undefined when it cannot be read. */
export function peakRssMb(pid: number | undefined): number | undefined {
  if (!pid) return undefined;
  try {
    const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmHWM:\s+(\d+) kB/);
    return m ? Math.round(Number(m[1]) / 1024) : undefined;
  } catch {
    return undefined;
  }
}

/** Child process ids of `pid` (Linux). */
export function childPids(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
}

/** Writes a progress line to stderr. */
export function progress(line: string): void {
  process.stderr.write(`[bench] ${line}\n`);
}

/** Runs `send(i)` for i in [0, count) at `perSecond`, awaiting each batch tick; resolves when all were started. */
export async function atRate(count: number, perSecond: number, send: (i: number) => void): Promise<void> {
  const start = performance.now();
  for (let i = 0; i < count; ) {
    const due = Math.min(count, Math.floor(((performance.now() - start) / 1000) * perSecond) + 1);
    for (; i < due; i++) send(i);
    await new Promise((r) => setTimeout(r, 1));
  }
}

/** Runs `count` async jobs with at most `window` in flight. */
export async function windowed(
  count: number,
  window: number,
  job: (i: number) => Promise<unknown>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < count) await job(next++);
  };
  await Promise.all(Array.from({ length: Math.min(window, count) }, worker));
}

/** CPU seconds (user + system) a process has used so far (Linux), or undefined. */
export function cpuSeconds(pid: number | undefined): number | undefined {
  if (!pid) return undefined;
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return undefined;
  }
}

/** Cores a {@link cpuDuring} measurement's processes kept busy: their CPU seconds per second of wall time. */
export function coresBusy(m: { wall: number; cpu: Record<string, number> }): number {
  const cpu = Object.values(m.cpu).reduce((a, b) => a + b, 0);
  return m.wall > 0 ? Math.round((cpu / m.wall) * 100) / 100 : 0;
}

/** CPU microseconds per delivery, per process, from CPU seconds per process. */
export function perDeliveryUs(cpu: Record<string, number>, deliveries: number): Record<string, number> {
  return Object.fromEntries(Object.entries(cpu).map(([k, v]) => [k, Math.round((v / deliveries) * 1e6)]));
}

// This process's garbage collections since the first gcSeconds(), ms (observed from then on).
let ownGcMs: number | undefined;

/**
 * Seconds spent in garbage collection so far by this process (the bench's own: raw's clients and
 * fan-out, or Parley's agents) and by a services process (its prom-client
 * `nodejs_gc_duration_seconds`, every kind of collection).
 */
export async function gcSeconds(metricsUrl: string): Promise<{ bench: number; services: number }> {
  if (ownGcMs === undefined) {
    ownGcMs = 0;
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) ownGcMs = (ownGcMs ?? 0) + e.duration;
    }).observe({ entryTypes: ['gc'] });
  }
  const metrics = parsePrometheusText(await (await fetch(metricsUrl)).text());
  return { bench: ownGcMs / 1000, services: sampleValue(metrics, 'nodejs_gc_duration_seconds_sum') };
}

/** CPU seconds each named process spends while `fn` runs, and the wall time. */
export async function cpuDuring<T>(pids: Record<string, number | undefined>, fn: () => Promise<T>) {
  const before = Object.fromEntries(Object.entries(pids).map(([k, pid]) => [k, cpuSeconds(pid) ?? 0]));
  const t0 = performance.now();
  const result = await fn();
  const wall = (performance.now() - t0) / 1000;
  const cpu = Object.fromEntries(
    Object.entries(pids).map(([k, pid]) => [
      k,
      Math.round(((cpuSeconds(pid) ?? 0) - (before[k] ?? 0)) * 100) / 100,
    ]),
  );
  return { result, wall: Math.round(wall * 100) / 100, cpu };
}

/**
 * Runs `fn` under the V8 CPU profiler of this process when `dir` is set, writing
 * `<dir>/<name>.cpuprofile` (open it in Chrome DevTools).
 */
export async function profiled<T>(dir: string | undefined, name: string, fn: () => Promise<T>): Promise<T> {
  if (!dir) return fn();
  const { Session } = await import('node:inspector/promises');
  const { mkdir, writeFile } = await import('node:fs/promises');
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  try {
    return await fn();
  } finally {
    const { profile } = await session.post('Profiler.stop');
    // The directory may not exist yet: the services' --cpu-prof makes it only when they exit.
    await mkdir(dir, { recursive: true });
    await writeFile(`${dir}/${name}.cpuprofile`, JSON.stringify(profile));
    session.disconnect();
  }
}

/** How late a process's event loop ran its timers: p50/p99/max, ms past the sampling interval. */
export interface LoopDelay {
  p50: number;
  p99: number;
  max: number;
}

const LOOP_SAMPLE_MS = 10;

/**
 * This process's event-loop delay while `fn` runs (`monitorEventLoopDelay`, a timer every 10 ms): a
 * message that reached the socket waits at least this long before its callback runs.
 */
export async function loopDelayDuring<T>(fn: () => Promise<T>): Promise<{ result: T; delay: LoopDelay }> {
  const h = monitorEventLoopDelay({ resolution: LOOP_SAMPLE_MS });
  h.enable();
  try {
    const result = await fn();
    return { result, delay: pastInterval(h.percentile(50), h.percentile(99), h.max, LOOP_SAMPLE_MS) };
  } finally {
    h.disable();
  }
}

/** Histogram figures (ns, the whole interval between two samples) as delays past the interval, ms. */
function pastInterval(p50Ns: number, p99Ns: number, maxNs: number, intervalMs: number): LoopDelay {
  const ms = (ns: number) => Math.max(0, Math.round((ns / 1e6 - intervalMs) * 10) / 10);
  return { p50: ms(p50Ns), p99: ms(p99Ns), max: ms(maxNs) };
}

/**
 * The event-loop delay of a Parley services process since its `/metrics` were last read, from
 * prom-client's `nodejs_eventloop_lag_*` (sampled every 100 ms; reading them starts a new window).
 */
export async function servicesLoopDelay(metricsUrl: string): Promise<LoopDelay> {
  const metrics = parsePrometheusText(await (await fetch(metricsUrl)).text());
  const seconds = (name: string) => sampleValue(metrics, name);
  return pastInterval(
    seconds('nodejs_eventloop_lag_p50_seconds') * 1e9,
    seconds('nodejs_eventloop_lag_p99_seconds') * 1e9,
    seconds('nodejs_eventloop_lag_max_seconds') * 1e9,
    100,
  );
}
