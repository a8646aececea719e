/**
 * `pnpm bench:hop`, short form: both pipelines deliver every message and the result says what was
 * compared; the CLI refuses bad input with its usage.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

const main = join(import.meta.dirname, 'hop.ts');
// A pipeline that lost a message would wait for it for good: 2 minutes is far past a short run.
const run = (...args: string[]) =>
  spawnSync(process.execPath, ['--import', 'tsx', main, ...args], {
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...process.env, NODE_OPTIONS: '--conditions=@parley/source' },
  });

test('bench:hop, short form: raw and raw with a relay and 4 inbox streams each deliver every message', () => {
  // Each throughput run resolves only once every member acknowledged every message (300 × 3).
  const r = run('--messages', '300', '--runs', '1', '--shards', '4', '--json');
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout) as {
    messages: number;
    second: {
      relay: boolean;
      inboxStreams: number;
      payloadBytes: number;
      parleyHeaders: boolean;
      permissions: boolean;
    };
    raw: number;
    relayed: number;
    ratio: number;
    rawRuns: number[];
    relayedRuns: number[];
    natsServer: string;
  };
  assert.equal(out.messages, 300);
  assert.deepEqual(out.second, {
    relay: true,
    inboxStreams: 4,
    payloadBytes: 512,
    parleyHeaders: false,
    permissions: false,
  });
  assert.equal(out.rawRuns.length, 1);
  assert.equal(out.relayedRuns.length, 1);
  assert.ok(out.raw > 0 && out.relayed > 0, `deliveries/s: ${out.raw}, ${out.relayed}`);
  assert.equal(out.ratio, Math.round((out.relayed / out.raw) * 100) / 100);
  assert.match(out.natsServer, /nats-server: v\d+\.\d+\.\d+/);
});

test('the bench:hop CLI: --help lists the flags, a bad value is refused with the usage', () => {
  const help = run('--help');
  assert.equal(help.status, 0, help.stderr);
  for (const flag of [
    '--messages',
    '--runs',
    '--no-relay',
    '--shards',
    '--payload-bytes',
    '--parley-headers',
    '--json',
  ]) {
    assert.ok(help.stdout.includes(flag), `--help names ${flag}`);
  }
  const bad = run('--shards', 'many');
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /--shards must be a whole number ≥ 1, not “many”/);
  const unknown = run('--shard', '4');
  assert.equal(unknown.status, 2);
  assert.match(unknown.stderr, /Unknown option '--shard'/);
});
