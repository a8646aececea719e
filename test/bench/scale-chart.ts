/**
 * The chart of `pnpm bench:scale`'s cost curves (Vega-Lite, rendered to SVG headless in Node: no
 * browser, no canvas). `pnpm bench:scale:chart [result.json …] [--out file.svg]` regenerates
 * docs/bench/scale.svg from the committed results in docs/bench/ (or from the files named).
 */
import { readFile, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import type { ScaleResult, ScaleStep } from './scale.js';

/** One point of a curve. */
interface Point {
  panel: string;
  series: string;
  agents: number;
  value: number;
}

const PANELS: { title: string; unit: string; series: [string, (s: ScaleStep) => number][] }[] = [
  {
    title: 'Per-message cost at a fixed rate',
    unit: 'CPU µs per delivery',
    series: [
      ['nats-server', (s) => s.fixedRate.cpuUsPerDelivery.nats],
      ['services', (s) => s.fixedRate.cpuUsPerDelivery.services],
    ],
  },
  {
    title: 'Send → handler at a fixed rate',
    unit: 'ms',
    series: [
      ['p50', (s) => s.fixedRate.latencyMs.p50],
      ['p99', (s) => s.fixedRate.latencyMs.p99],
    ],
  },
  {
    title: 'Idle cost per connected agent',
    unit: '% of a core × 1000',
    series: [['CPU (nats-server + services)', (s) => s.idleConnected.cpuPercentPerConnectedAgent * 1000]],
  },
  {
    title: 'Memory',
    unit: 'MB (RSS)',
    series: [
      ['nats-server, none connected', (s) => s.idleRegistered.natsRssMb],
      ['nats-server, N connected', (s) => s.idleConnected.natsRssMb],
      ['services', (s) => s.idleConnected.servicesRssMb],
    ],
  },
  {
    title: 'Onboarding',
    unit: 'ms, p99',
    series: [
      ['agent create', (s) => s.register.ms.p99],
      ['inbox consumer create', (s) => s.inboxConsumerCreateMs.p99],
      ['SDK connect', (s) => s.connectMs.p99],
      ['inbox attach', (s) => s.attachMs.p99],
    ],
  },
  {
    title: 'Capacity (burst)',
    unit: 'deliveries/s',
    series: [['deliveries/s', (s) => s.burst.deliveriesPerSec]],
  },
];

/** The chart of one or more results (standalone and cluster), as an SVG document. */
export async function renderScaleChart(results: ScaleResult[]): Promise<string> {
  const points: Point[] = [];
  for (const r of results) {
    for (const p of PANELS) {
      for (const [name, f] of p.series) {
        for (const s of r.steps) {
          const value = f(s);
          if (Number.isFinite(value)) {
            points.push({
              panel: p.title,
              series: `${r.topology}: ${name}`,
              agents: s.registeredAgents,
              value,
            });
          }
        }
      }
    }
  }
  const where = results
    .map((r) => `${r.topology}: ${r.env.cpus} CPUs, load ${r.loadAverage.start[0]}→${r.loadAverage.end[0]}`)
    .join('; ');
  const spec: TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: {
      text: 'Parley cost curve: 100 → 10,000 registered agents (pnpm bench:scale)',
      subtitle: `nats-server ${results[0]?.env.natsServer ?? '?'}, ${where}`,
    },
    config: { font: 'sans-serif', view: { stroke: '#ddd' } },
    columns: 2,
    concat: PANELS.map((p) => ({
      title: p.title,
      width: 340,
      height: 180,
      data: { values: points.filter((x) => x.panel === p.title) },
      mark: { type: 'line', point: true },
      encoding: {
        x: {
          field: 'agents',
          type: 'quantitative',
          scale: { type: 'log' },
          title: 'registered agents',
          axis: { values: [100, 1000, 10000], format: ',d' },
        },
        y: { field: 'value', type: 'quantitative', title: p.unit },
        color: {
          field: 'series',
          type: 'nominal',
          title: null,
          legend: { orient: 'bottom', columns: 1, labelLimit: 400 },
        },
      },
    })),
    resolve: { scale: { color: 'independent' } },
  };
  const view = new vega.View(vega.parse(compile(spec).spec), { renderer: 'none' });
  const svg = await view.toSVG();
  view.finalize();
  return svg;
}

// `pnpm bench:scale:chart`
if (process.argv[1] && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  const docs = resolve(import.meta.dirname, '../../docs/bench');
  const { values, positionals } = parseArgs({
    options: { out: { type: 'string' } },
    allowPositionals: true,
  });
  const inputs = positionals.length
    ? positionals
    : [resolve(docs, 'scale-standalone.json'), resolve(docs, 'scale-cluster.json')];
  const results: ScaleResult[] = [];
  for (const f of inputs) {
    try {
      results.push(JSON.parse(await readFile(f, 'utf8')) as ScaleResult);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || positionals.length) throw err;
    }
  }
  if (!results.length) throw new Error(`no results: ${inputs.join(', ')}`);
  const out = values.out ?? resolve(docs, 'scale.svg');
  await writeFile(out, await renderScaleChart(results));
  process.stderr.write(`wrote ${out}\n`);
}
