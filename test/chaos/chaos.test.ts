/**
 * The short form of the chaos test (`pnpm test:chaos` runs the long one): on the 3-node cluster under
 * paced traffic, two kills -9 of a random node, one partition of a node's routes, one SIGSTOP pause
 * past the election timeouts and a restart of each rooms replica (kill -9, then SIGTERM). Every
 * accepted message must reach every member once, in room order, within the resume bound after each
 * fault; the fan-out lease never has two holders; no inbox is written by two writers. See chaos.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CHAOS_BOUND_MS, formatReport, runChaos } from './chaos.js';

describe('chaos on the 3-node cluster under load (short form)', () => {
  it('kills, a partition, a pause and replica restarts: nothing lost, doubled or reordered; delivery resumes within the bound', async (t) => {
    const report = await runChaos({
      kills: 2,
      killEveryMs: 10_000,
      partitions: 1,
      partitionMs: 12_000,
      pauses: 1,
      pauseMs: 12_000,
      replicaRounds: 1,
      boundMs: CHAOS_BOUND_MS,
      log: (line) => t.diagnostic(line),
    });
    const table = formatReport(report);
    console.log(table);
    if (report.diagnostics) console.log(JSON.stringify(report.diagnostics, null, 2));
    assert.deepEqual(report.violations, [], 'invariants broken');
    const kinds = new Set(report.events.map((e) => e.kind));
    assert.deepEqual([...kinds].sort(), ['kill', 'partition', 'pause', 'replica'], 'every fault ran');
    assert.ok(report.accepted > 0 && report.delivered > 0, 'traffic flowed');
  });
});
