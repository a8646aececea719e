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

/**
 * How long the short form cuts or pauses a node: past nats-server 2.9's raft election timeout
 * (2–5 s), so the majority elects new leaders and a paused node misses its heartbeats, but not past
 * the 10 s after which a cut-off leader steps down on its own — that longer case is the long form's
 * (12 s by default), which costs 15–30 s more per fault in nats-server's recovery.
 */
const SHORT_FAULT_MS = 6_000;

describe('chaos on the 3-node cluster under load (short form)', () => {
  it('kills, a partition, a pause and replica restarts: nothing lost, doubled or reordered; delivery resumes within the bound', async (t) => {
    const report = await runChaos({
      kills: 1,
      killEveryMs: 10_000,
      partitions: 1,
      partitionMs: SHORT_FAULT_MS,
      pauses: 1,
      pauseMs: SHORT_FAULT_MS,
      replicaRounds: 1,
      // One restart, a graceful one: it hands every partition over and back (the handover rule).
      replicasPerRound: 1,
      firstReplicaStop: 'SIGTERM',
      boundMs: CHAOS_BOUND_MS,
      log: (line) => t.diagnostic(line),
      // PARLEY_CHAOS_KEEP_LOGS=<dir>: the nats-server logs and stores and the replicas' output kept.
      ...(process.env.PARLEY_CHAOS_KEEP_LOGS ? { keepLogsIn: process.env.PARLEY_CHAOS_KEEP_LOGS } : {}),
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
