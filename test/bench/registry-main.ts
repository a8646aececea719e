/**
 * Runs the registry search benchmark:
 * `npx tsx --conditions=@parley/source test/bench/registry-main.ts [agents]`
 */
import { benchRegistrySearch } from './registry.js';

const agents = Number(process.argv[2] ?? 10_000);
const r = await benchRegistrySearch({ agents, progress: (l) => process.stderr.write(`${l}\n`) });
const line = (name: string, p: { p50: number; p95: number; p99: number; meanResults?: number }) =>
  `${name.padEnd(16)} p50 ${p.p50.toFixed(2)} ms  p95 ${p.p95.toFixed(2)} ms  p99 ${p.p99.toFixed(2)} ms${
    p.meanResults !== undefined ? `  (${p.meanResults} results/page)` : ''
  }  ×${(p.p50 / r.baselineWhoami.p50).toFixed(2)} of whoami`;
process.stdout.write(
  `${[
    `registry search with ${r.agents} agents (registered in ${r.registerSeconds} s, ${r.registerPerSecond}/s)`,
    line('whoami baseline', r.baselineWhoami),
    line('skill', r.skill),
    line('tag', r.tag),
    line('text', r.text),
    JSON.stringify(r),
  ].join('\n')}\n`,
);
