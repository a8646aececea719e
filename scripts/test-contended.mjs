// pnpm test:contended: the crash tests (reliability, and the cluster failover) with both cores kept
// busy by two busy-loop processes, several runs in a row (default 3). Every run must pass, and no
// accepted message may reach a handler later than the bound (default 5 s) after the last kill or
// restart of its test (each test reports that figure to PARLEY_RECOVERY_REPORT).
//
// A restart is over when JetStream answers again. For a backbone killed whole (the nats-server
// kill test) and a restarted room stream leader, the test also reports when its streams had
// leaders and answered and the JetStream API had a meta leader, and the bound counts from then: a
// 3-node cluster killed at once spent 6–29 s electing its Raft leaders on this machine under
// contention before any client can store or read a message, and one node's restart left the meta
// layer without a leader for up to 15 s — nats-server's own recovery, the same for anything on
// it. Both figures are printed.
//
// Usage: pnpm test:contended [--runs=3] [--bound-ms=5000] [--help]
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { root } from './bootstrap.mjs';

const usage = `pnpm test:contended [--runs=<n>] [--bound-ms=<ms>]

  Runs the crash tests (reliability and cluster failover, 1 and 3 nodes) with every core kept busy
  by a busy loop, <n> times in a row. Fails when a run fails or when an accepted message reached its
  handler later than <ms> after the last kill or restart of its test (once JetStream answered).

  --runs=<n>       runs in a row                                  default 3
  --bound-ms=<ms>  latest allowed delivery after a kill/restart   default 5000
  --help           this text
`;
let values;
try {
  ({ values } = parseArgs({
    options: {
      runs: { type: 'string', default: '3' },
      'bound-ms': { type: 'string', default: '5000' },
      help: { type: 'boolean', short: 'h' },
    },
  }));
} catch (err) {
  process.stderr.write(`${err.message}\n\n${usage}`);
  process.exit(2);
}
if (values.help) {
  process.stdout.write(usage);
  process.exit(0);
}
const arg = (name) => {
  const value = values[name];
  if (!/^[1-9][0-9]*$/.test(value)) {
    process.stderr.write(`--${name} must be a positive whole number, not “${value}”\n\n${usage}`);
    process.exit(2);
  }
  return Number(value);
};
const runs = arg('runs');
const boundMs = arg('bound-ms');
/** The figure held against the bound: from when JetStream answered again, when the test says. */
const judged = (f) => f.afterStreamsAnswerMs ?? f.worstMs;
const suites = [
  {
    label: 'reliability + cluster failover, 1-node backbone',
    args: [
      'test/integration/reliability.test.ts',
      'test/integration/reliability-processes.test.ts',
      'test/cluster',
    ],
  },
  {
    label: 'reliability, 3-node cluster',
    args: [
      '--nodes=3',
      'test/integration/reliability.test.ts',
      'test/integration/reliability-processes.test.ts',
    ],
  },
];

// One busy loop per core: the tests compete for CPU with something that never yields.
const busy = Array.from({ length: Math.max(2, availableParallelism()) }, () =>
  spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }),
);
const stopBusy = () => {
  for (const b of busy) if (b.exitCode === null) b.kill('SIGKILL');
};
/** The suite running now: in a process group of its own, so a stop reaches its nats-servers too. */
let suiteRun;
const stopSuite = () => {
  if (suiteRun?.exitCode === null && suiteRun.signalCode === null) {
    try {
      process.kill(-suiteRun.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
};
process.once('exit', () => {
  stopBusy();
  stopSuite();
});
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => {
    stopBusy();
    stopSuite();
    process.exit(130);
  });
}
const dir = mkdtempSync(join(tmpdir(), 'parley-contended-'));
const rows = [];
let failed = false;
try {
  for (let run = 1; run <= runs; run++) {
    for (const suite of suites) {
      const report = join(dir, `run${run}-${rows.length}.jsonl`);
      const t0 = Date.now();
      process.stderr.write(`\n[contended] run ${run}/${runs}: ${suite.label}\n`);
      // Two files at a time, as its 5 s bound was set and held from session 11 to 25: the busy loops
      // are the contention. (Session 26, at 3 at a time: 2 of 6 suite runs over the bound, 6.1 and
      // 9.0 s, both the nats-server kill; see docs/operations.md.)
      suiteRun = spawn(process.execPath, ['scripts/run-tests.mjs', '--concurrency=2', ...suite.args], {
        cwd: root,
        stdio: 'inherit',
        detached: true,
        env: { ...process.env, PARLEY_RECOVERY_REPORT: report },
      });
      const [status] = await once(suiteRun, 'exit');
      let figures = [];
      try {
        figures = readFileSync(report, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l));
      } catch {
        figures = [];
      }
      const worst = figures.reduce((w, f) => Math.max(w, judged(f)), 0);
      const ok = status === 0 && figures.length > 0 && worst <= boundMs;
      if (!ok) failed = true;
      rows.push({
        run,
        suite: suite.label,
        exit: status,
        seconds: Math.round((Date.now() - t0) / 1000),
        worst,
        figures,
        ok,
        // The machine may be shared: a figure means little without the load it was taken under.
        load: loadavg()
          .map((l) => l.toFixed(1))
          .join(' '),
      });
    }
  }
} finally {
  stopBusy();
  rmSync(dir, { recursive: true, force: true });
}

process.stdout.write(`\npnpm test:contended: ${runs} runs, ${busy.length} busy loops, bound ${boundMs} ms\n`);
for (const row of rows) {
  process.stdout.write(
    `${row.ok ? 'ok  ' : 'FAIL'} run ${row.run} ${row.suite}: exit ${row.exit}, ${row.seconds} s, worst delivery ${row.worst} ms after the last kill/restart (once JetStream answered), load ${row.load}\n`,
  );
  for (const f of row.figures)
    process.stdout.write(
      `       ${f.test} (${f.nodes} node${f.nodes > 1 ? 's' : ''}): ${f.worstMs} ms${
        f.streamsAnswerMs === undefined
          ? ''
          : ` (streams answered ${f.streamsAnswerMs} ms after the restart; worst ${f.afterStreamsAnswerMs} ms after that)`
      }\n`,
    );
}
process.exit(failed ? 1 : 0);
