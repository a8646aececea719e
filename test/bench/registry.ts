/**
 * Registry search at scale: registers N agents (10,000 by default) through the real API, then
 * measures discovery latency by skill, tag and free text as a member of one org (so the visibility
 * filter runs), next to a `whoami` round trip measured in the same run as the baseline.
 */
import type { AgentCardInput, Visibility } from '@parley/contracts';
import { registryApi } from '@parley/contracts';
import { connectAdmin, connectTo, createHuman, createOrg, startParley } from '../harness/index.js';

/** Options of {@link benchRegistrySearch}. */
export interface RegistryBenchOptions {
  /** Agents to register. @default 10000 */
  agents?: number;
  /** Requests per kind of search. @default 300 */
  queries?: number;
  /** Registrations in flight at once. @default 64 */
  concurrency?: number;
  /** Progress lines. */
  progress?: (line: string) => void;
}

/** Latency percentiles, in milliseconds. */
export interface Percentiles {
  p50: number;
  p95: number;
  p99: number;
  /** Mean number of agents a query matched on its first page. */
  meanResults?: number;
}

/** What {@link benchRegistrySearch} measured. */
export interface RegistryBenchResult {
  agents: number;
  registerSeconds: number;
  registerPerSecond: number;
  baselineWhoami: Percentiles;
  skill: Percentiles;
  tag: Percentiles;
  text: Percentiles;
}

const VERBS = [
  'review',
  'summarize',
  'translate',
  'triage',
  'plan',
  'test',
  'deploy',
  'audit',
  'search',
  'draft',
];
const DOMAINS = [
  'code',
  'docs',
  'sales',
  'hr',
  'finance',
  'legal',
  'support',
  'ops',
  'data',
  'security',
  'design',
  'infra',
  'mobile',
  'web',
  'billing',
  'crm',
  'erp',
  'payroll',
  'tickets',
  'email',
];
const TAGS = [
  'git',
  'jira',
  'slack',
  'sap',
  'salesforce',
  'databricks',
  'python',
  'typescript',
  'sql',
  'pdf',
  'excel',
  'k8s',
  'aws',
  'gcp',
  'azure',
  'oauth',
  'gdpr',
  'soc2',
  'invoices',
  'contracts',
  'llm',
  'rag',
  'graphs',
  'metrics',
  'logs',
  'traces',
  'alerts',
  'oncall',
  'ci',
  'cd',
];
const WORDS = [
  'careful',
  'fast',
  'thorough',
  'friendly',
  'pull',
  'requests',
  'quarterly',
  'reports',
  'customer',
  'tickets',
  'release',
  'notes',
  'incident',
  'postmortem',
  'budget',
  'forecast',
  'contract',
  'clauses',
  'onboarding',
  'offboarding',
  'invoice',
  'matching',
  'ledger',
  'reconciliation',
  'schema',
  'migration',
  'dashboard',
  'latency',
  'regression',
  'flaky',
  'benchmark',
  'security',
  'review',
  'threat',
  'model',
  'privacy',
  'policy',
  'expense',
  'approval',
  'vendor',
  'renewal',
  'churn',
  'pipeline',
  'lead',
  'scoring',
];
const RUNTIMES = ['claude-code', 'codex', 'langgraph', 'bridge', 'custom'] as const;

/** A small deterministic PRNG, so every run registers the same agents. */
function prng(seed: number) {
  let s = seed >>> 0;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 0x1_0000_0000;
  };
}

function percentiles(samples: number[], results?: number[]): Percentiles {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
  const round = (v: number) => Math.round(v * 100) / 100;
  return {
    p50: round(at(0.5)),
    p95: round(at(0.95)),
    p99: round(at(0.99)),
    ...(results ? { meanResults: round(results.reduce((a, b) => a + b, 0) / results.length) } : {}),
  };
}

/** Registers the agents, measures searches, stops everything. */
export async function benchRegistrySearch(opts: RegistryBenchOptions = {}): Promise<RegistryBenchResult> {
  const total = opts.agents ?? 10_000;
  const queries = opts.queries ?? 300;
  const concurrency = opts.concurrency ?? 64;
  const say = opts.progress ?? (() => undefined);
  const rnd = prng(42);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)] as T;
  const skills = DOMAINS.flatMap((d) => VERBS.map((v) => `${d}.${v}`));

  const parley = await startParley();
  try {
    const admin = await connectAdmin(parley);
    const orgs = [];
    for (let i = 0; i < 5; i++) orgs.push(await createOrg(admin, `bench-org-${i}`));
    const owners: string[] = [];
    let memberCreds = '';
    for (let i = 0; i < 50; i++) {
      const h = await createHuman(admin, {
        org: (orgs[i % orgs.length] as { id: string }).id,
        name: `owner-${i}`,
      });
      owners.push(h.user.id);
      if (i === 0) memberCreds = h.creds;
    }

    say(`registering ${total} agents (${concurrency} at a time)…`);
    const started = performance.now();
    let next = 0;
    const card = (i: number): AgentCardInput => {
      const n = 1 + Math.floor(rnd() * 3);
      const visibility: Visibility = rnd() < 0.6 ? 'org' : rnd() < 0.75 ? 'public' : 'private';
      return {
        name: `agent-${i}`,
        description: Array.from({ length: 8 }, () => pick(WORDS)).join(' '),
        runtime: pick(RUNTIMES),
        visibility,
        skills: Array.from({ length: n }, (_, k) => {
          const id = pick(skills);
          return {
            id: `${id}${k === 0 ? '' : `.v${k}`}`,
            name: id.replace('.', ' '),
            tags: [pick(TAGS), pick(TAGS)],
          };
        }),
      };
    };
    const worker = async () => {
      for (;;) {
        const i = next++;
        if (i >= total) return;
        await admin.call(
          registryApi.createAgent,
          { owner: owners[i % owners.length] as string, card: card(i) },
          {
            timeout: 30_000,
          },
        );
        if ((i + 1) % 1000 === 0) say(`  ${i + 1} registered`);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    const registerSeconds = (performance.now() - started) / 1000;

    const member = await connectTo(parley, memberCreds);
    const measure = async (call: () => Promise<{ agents: unknown[] }>) => {
      const ms: number[] = [];
      const counts: number[] = [];
      for (let i = 0; i < 20; i++) await call(); // warm-up
      for (let i = 0; i < queries; i++) {
        const t = performance.now();
        const r = await call();
        ms.push(performance.now() - t);
        counts.push(r.agents.length);
      }
      return percentiles(ms, counts);
    };
    say('measuring…');
    const whoamiMs: number[] = [];
    for (let i = 0; i < queries; i++) {
      const t = performance.now();
      await member.whoami();
      whoamiMs.push(performance.now() - t);
    }
    const result: RegistryBenchResult = {
      agents: total,
      registerSeconds: Math.round(registerSeconds * 10) / 10,
      registerPerSecond: Math.round(total / registerSeconds),
      baselineWhoami: percentiles(whoamiMs),
      skill: await measure(() => member.directory.discover({ skill: pick(skills) })),
      tag: await measure(() => member.directory.discover({ tag: pick(TAGS) })),
      text: await measure(() =>
        member.directory.discover({ text: rnd() < 0.5 ? pick(WORDS) : `${pick(WORDS)} ${pick(WORDS)}` }),
      ),
    };
    await member.close();
    await admin.close();
    return result;
  } finally {
    await parley.destroy();
  }
}
