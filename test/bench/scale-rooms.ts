/**
 * Diagnosis for the 10,000 tier of `pnpm bench:scale`: registers agents in steps and, at each
 * checkpoint, times the pieces of `rooms.create` on their own (inbox `consumers.info`,
 * `registry.describeParticipant`, `consent.check`) and then whole room creations, with the
 * services' CPU. Not part of `npm test`.
 *
 * `tsx --conditions=@parley/source bench/scale-rooms.ts 1000,3000,10000 [--cpu-prof]`
 */
import { fork } from 'node:child_process';
import { once } from 'node:events';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { credsAuthenticator, connect as natsConnect } from '@nats-io/transport-node';
import {
  consentApi,
  inboxStream,
  registryApi,
  request,
  roomsApi,
  serviceId,
  subjects,
} from '@parley/contracts';
import { connect } from '@parley/sdk';
import { cpuSeconds, percentiles, windowed } from './stats.js';

const here = import.meta.dirname;
const checkpoints = (process.argv[2] ?? '1000,3000,10000').split(',').map(Number);
const prof = process.argv.includes('--cpu-prof');
const host = fork(join(here, 'scale-backbone.ts'), [], {
  execArgv: [
    '--import',
    'tsx',
    '--conditions=@parley/source',
    '--max-old-space-size=4096',
    ...(prof ? ['--cpu-prof', '--cpu-prof-dir=/tmp/k21x/prof'] : []),
  ],
  cwd: join(here, '..'),
  env: { ...process.env, PARLEY_TEST_LOG: process.env.PARLEY_TEST_LOG ?? 'warn', NODE_OPTIONS: '' },
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
});
const [ready] = (await once(host, 'message')) as [
  { servers: string[]; adminCreds: string; serviceCreds: string },
];
const { servers } = ready;
const me = serviceId('scalebench');
const svc = await natsConnect({
  servers,
  // Services answer only on the caller's own reply prefix.
  inboxPrefix: subjects.replyPrefix(me),
  authenticator: credsAuthenticator(new TextEncoder().encode(ready.serviceCreds)),
});
const jsm = await jetstreamManager(svc, { timeout: 30_000 });
const admin = await connect({ servers, creds: ready.adminCreds, presence: false });
const log = (s: string) =>
  console.log(`${new Date().toISOString().slice(11, 19)} [${loadavg()[0]?.toFixed(1)}] ${s}`);
const pct = (xs: number[]) => {
  const p = percentiles(xs);
  return `p50 ${p.p50.toFixed(1)} p99 ${p.p99.toFixed(1)} max ${Math.max(...xs).toFixed(1)} ms (n ${xs.length})`;
};
const time = async (n: number, fn: (i: number) => Promise<unknown>, window = 1) => {
  const ms: number[] = [];
  const errors: string[] = [];
  await windowed(n, window, async (i) => {
    const t = performance.now();
    try {
      await fn(i);
      ms.push(performance.now() - t);
    } catch (err) {
      errors.push(`${(err as { code?: string }).code ?? ''} ${(err as Error).message}`.slice(0, 300));
    }
  });
  return { ms, errors };
};
const agents: { id: string; creds: string }[] = [];
let roomNo = 0;
try {
  for (const cp of checkpoints) {
    const first = agents.length;
    const r0 = performance.now();
    const cpu0 = cpuSeconds(host.pid ?? 0) ?? 0;
    await windowed(cp - first, 16, async (i) => {
      const c = await admin.call(
        registryApi.createAgent,
        { card: { name: `scale-${first + i}` } },
        { timeout: 30_000 },
      );
      agents[first + i] = { id: c.agent.id, creds: c.credentials.creds };
    });
    log(
      `${cp} registered: ${(cp - first) / ((performance.now() - r0) / 1000)} /s, services CPU ${((cpuSeconds(host.pid ?? 0) ?? 0) - cpu0).toFixed(1)} s`,
    );
    const pick = (i: number) => agents[first + ((i * 37) % (cp - first))] as { id: string; creds: string };
    const measure = async (label: string) => {
      const c0 = cpuSeconds(host.pid ?? 0) ?? 0;
      const info = await time(20, (i) => jsm.consumers.info(inboxStream(pick(i).id), pick(i).id));
      log(`${label} consumers.info ${pct(info.ms)} ${info.errors.slice(0, 2).join(' | ')}`);
      const desc = await time(20, (i) =>
        request(
          svc,
          me,
          registryApi.describeParticipant,
          { participant: pick(i + 100).id },
          { timeout: 30_000 },
        ),
      );
      log(`${label} describeParticipant ${pct(desc.ms)} ${desc.errors.slice(0, 2).join(' | ')}`);
      const chk = await time(20, (i) =>
        request(svc, me, consentApi.check, { a: pick(i + 200).id, b: pick(i + 300).id }, { timeout: 30_000 }),
      );
      log(`${label} consent.check ${pct(chk.ms)} ${chk.errors.slice(0, 2).join(' | ')}`);
      const rooms = await time(
        16,
        async (i) => {
          const r = roomNo++;
          const owner = await connect({ servers, creds: pick(i + 400).creds, presence: false });
          try {
            await owner.call(
              roomsApi.create,
              { title: `r${r}`, members: [1, 2, 3].map((k) => pick(i + 400 + k * 50).id), direct: false },
              { timeout: 60_000 },
            );
          } finally {
            await owner.close();
          }
        },
        4,
      );
      log(
        `${label} rooms.create ${pct(rooms.ms)} errors ${rooms.errors.length}: ${rooms.errors.slice(0, 3).join(' | ')}`,
      );
      log(`${label} services CPU ${((cpuSeconds(host.pid ?? 0) ?? 0) - c0).toFixed(1)} s`);
    };
    await measure(`${cp} at once:`);
    await new Promise((r) => setTimeout(r, 20_000));
    await measure(`${cp} +20 s:`);
  }
} finally {
  await admin.close().catch(() => undefined);
  await svc.close().catch(() => undefined);
  host.send({ type: 'stop' });
  await once(host, 'exit');
}
