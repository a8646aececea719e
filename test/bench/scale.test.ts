/**
 * The short form of `pnpm bench:scale` in `npm test`: 200 registered agents (tiers 100 and 200),
 * 100 rooms, 50 connected at once in two processes. It asserts what a user of the bench relies on
 * — every tier reported with every field, every message sent delivered to every member, the
 * curves that must grow with the agent count growing, the chart rendered, the CLI's flags — and
 * no timing.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { testNodes } from '../harness/index.js';
import { roomMembers, runScale, type ScaleStep, tiers } from './scale.js';
import { renderScaleChart } from './scale-chart.js';

test('tiers and room layout: 100, 1,000, 10,000 and rooms of 2–8 consecutive agents', () => {
  assert.deepEqual(tiers(10_000), [100, 1_000, 10_000]);
  assert.deepEqual(tiers(200), [100, 200]);
  assert.deepEqual(tiers(50), [50]);
  const sizes = Array.from({ length: 14 }, (_, r) => roomMembers(r, 10_000).length);
  assert.equal(Math.min(...sizes), 2);
  assert.equal(Math.max(...sizes), 8);
  assert.deepEqual(roomMembers(3, 10_000), [6, 7, 8, 9, 10]);
  // The last rooms of a tier wrap around rather than name agents that are not registered yet.
  assert.ok(roomMembers(49, 100).every((m) => m < 100));
});

test('the scale bench, short form: every tier reported, every message delivered', async () => {
  const lines: string[] = [];
  const result = await runScale({
    agents: 200,
    rooms: 100,
    connect: [50],
    cluster: testNodes() === 3,
    workers: 2,
    idleSeconds: 1,
    rateSeconds: 2,
    burstMessages: 200,
    fraction: 0.25,
    consumerSamples: 5,
    progress: (l) => lines.push(l),
  });
  assert.equal(result.topology, testNodes() === 3 ? 'cluster' : 'standalone');
  assert.deepEqual(
    result.steps.map((s) => [s.registeredAgents, s.rooms, s.connected]),
    [
      [100, 50, 50],
      [200, 100, 50],
    ],
    lines.join('\n'),
  );
  const finite = (name: string, x: number) => assert.ok(Number.isFinite(x) && x >= 0, `${name} = ${x}`);
  for (const s of result.steps) {
    assert.deepEqual(s.connectFailures, [], 'every agent connected');
    assert.deepEqual(s.sendFailures, [], 'every send accepted');
    assert.ok(s.activeRooms > 0);
    assert.ok(s.fixedRate.expectedDeliveries > 0);
    assert.equal(s.fixedRate.delivered, s.fixedRate.expectedDeliveries, 'every message reached every member');
    assert.ok(s.burst.deliveries >= s.burst.messages * 2, 'the burst reached every member (rooms have 2+)');
    assert.equal(s.register.count + (s.registeredAgents === 100 ? 0 : 100), s.registeredAgents);
    const fields: [string, number][] = [
      ['register p99', s.register.ms.p99],
      ['room create p99', s.roomCreate.ms.p99],
      ['inbox consumer create p99', s.inboxConsumerCreateMs.p99],
      ['connect p99', s.connectMs.p99],
      ['attach p99', s.attachMs.p99],
      ['idle nats CPU', s.idleConnected.natsCpuPercent],
      ['idle CPU per agent', s.idleConnected.cpuPercentPerConnectedAgent],
      ['latency p99', s.fixedRate.latencyMs.p99],
      ['nats µs/delivery', s.fixedRate.cpuUsPerDelivery.nats],
      ['services µs/delivery', s.fixedRate.cpuUsPerDelivery.services],
      ['deliveries/s', s.fixedRate.deliveriesPerSec],
    ];
    for (const [name, x] of fields) finite(name, x);
    assert.ok(s.idleConnected.natsRssMb > 0 && s.idleConnected.servicesRssMb > 0, 'memory was read');
  }
  // What must grow with the registered agents: one inbox consumer each, and the rooms.
  const [a, b] = result.steps as [ScaleStep, ScaleStep];
  assert.ok(
    a.inboxConsumers >= 100 && b.inboxConsumers - a.inboxConsumers === 100,
    'one inbox consumer per agent',
  );
  assert.ok(b.rooms > a.rooms);
  // The same fixed rate at every tier, so the per-message costs compare.
  assert.equal(a.fixedRate.roomMessagesPerSec, b.fixedRate.roomMessagesPerSec);
  assert.ok(JSON.parse(JSON.stringify(result)).steps.length === 2, 'the result is JSON');

  const svg = await renderScaleChart([result]);
  assert.match(svg, /^<svg /);
  assert.match(svg, /Per-message cost at a fixed rate/);
  assert.match(svg, new RegExp(`${result.topology}: nats-server`));
});

test('the bench:scale CLI: --help lists the flags, a bad value is refused with the usage', () => {
  const main = join(import.meta.dirname, 'scale-main.ts');
  const run = (...args: string[]) =>
    spawnSync(process.execPath, ['--import', 'tsx', main, ...args], {
      encoding: 'utf8',
      env: { ...process.env, NODE_OPTIONS: '--conditions=@parley/source' },
    });
  const help = run('--help');
  assert.equal(help.status, 0, help.stderr);
  for (const flag of ['--agents', '--rooms', '--connect', '--cluster', '--json', '--out']) {
    assert.ok(help.stdout.includes(flag), `--help names ${flag}`);
  }
  const bad = run('--agents', 'many');
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /--agents must be a positive number, not “many”/);
  const unknown = run('--agnets', '5');
  assert.equal(unknown.status, 2);
  assert.match(unknown.stderr, /Unknown option '--agnets'/);
});
