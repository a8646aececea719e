/**
 * Chaos on the 3-node test cluster under load (`pnpm test:chaos`; a short form runs in `npm test`).
 *
 * Parley runs against a 3-node JetStream cluster (R3 streams and buckets, R1 inbox consumers) with
 * the control plane in the test process and the message path — ingress and fan-out — in separate
 * rooms replica processes, so that restarting one hands its fan-out leases over. Agents send at a
 * paced rate into rooms of two to three members while faults are injected one after the other:
 *
 * - `kill`: kill -9 of a random nats-server node, restarted at once with its data;
 * - `partition`: one node's route connections to the other two are cut for longer than the raft
 *   election timeout and the leaders' lost-quorum interval (nats-server 2.9: 2–5 s and 10 s), then
 *   healed. Every route goes through a TCP proxy on loopback that this test owns (partition.ts):
 *   no root, no firewall, no address other than 127.0.0.1, nothing left behind. The node's client
 *   connections stay up, so agents and replicas connected to it talk to a node cut off from the
 *   cluster;
 * - `pause`: SIGSTOP of a random node past its heartbeats and election timeouts, then SIGCONT;
 * - `replica`: each rooms replica in turn killed -9 or stopped with SIGTERM, then started again.
 *
 * Invariants, checked while the faults run (not only at the end):
 * - every member handles each message of its room at most once and in room order (a handling at or
 *   below the member's last position in that room is a violation at once);
 * - no accepted send is lost, and delivery resumes within `boundMs`: once a fault is over (node
 *   restarted and ready, partition healed, node resumed, replica healthy) and nats-server has
 *   leaders again for the room log, the inboxes, the lease bucket and every consumer of the message
 *   path (which it must within `jetstreamBackMs`; how long it took is reported per fault), every
 *   accepted message reaches every member within `boundMs` of the later of its acceptance and that
 *   moment. While a fault lasts, deliveries may wait (an R1 inbox consumer on a killed node);
 *   after it, no message may wait longer;
 * - the fan-out lease never has two holders: a `fanout.<p>` key changes holder only after the
 *   previous holder's last write is a TTL old (it expired) or was deleted (handed over) — watched
 *   on the lease bucket (the test keeps a few entries per key there, so a release overwritten at
 *   once by the next holder's create is not missed; entries still expire a TTL after they were
 *   written, so after a gap in what the watch read — it was away longer than the TTL — the next
 *   holder of each key is counted as unchecked, not judged). A write JetStream stored on a revision
 *   that was no longer the key's last (nats-server #4320: the condition is checked before the raft
 *   proposal) is a JetStream defect, and two holders only if the superseded holder writes again;
 * - no two writers interleave in an inbox: in the inbox stream (read by an ordered consumer), every
 *   (member, room) subject's entries carry strictly growing room positions, each naming the one
 *   before it (`Parley-Prev-Seq`), which a second writer behind the fence would break — judged at
 *   the end: when the stream no longer holds the entry the chain broke after, JetStream lost it (a
 *   JetStream defect, reported), and the fan-out rightly went on from the one before.
 * Nothing is retried to hide a failure: the first violation stops the faults, and the run fails.
 */
import { spawnSync } from 'node:child_process';
import { copyFile, cp, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { jetstream, jetstreamManager, type StoredMsg } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { buckets, headerNames, inboxStream, streams, subjects } from '@parley/contracts';
import { retryJetStream } from '@parley/kit';
import type { Agent, Delivery } from '@parley/sdk';
import {
  type ServiceProcess,
  startParley,
  startRoomsProcess,
  type TestParley,
  type TestServer,
  waitFor,
} from '@parley/test/harness';
import { follow } from './follow.js';
import { InboxChains, LeaseHolders, RoomOrder } from './invariants.js';
import { RoutePartitions } from './partition.js';

/** The resume bound the chaos test enforces (ms); docs/operations.md says how it was measured. */
export const CHAOS_BOUND_MS = 30_000;

/** What a chaos run does. */
export interface ChaosOptions {
  /** Kills of a random node, `killEveryMs` apart. */
  kills: number;
  /** Time from one kill to the next (at least: the next waits until the cluster is whole again). */
  killEveryMs: number;
  partitions: number;
  /** How long a node stays cut off. */
  partitionMs: number;
  pauses: number;
  /** How long a node stays stopped (SIGSTOP). */
  pauseMs: number;
  /** Rounds of restarting every rooms replica in turn (kill -9 and SIGTERM alternate). */
  replicaRounds: number;
  /** Replicas restarted per round (the first ones). @default every replica */
  replicasPerRound?: number;
  /** How the first replica restart stops its replica; the next ones alternate. @default 'kill -9' */
  firstReplicaStop?: 'kill -9' | 'SIGTERM';
  /** Rooms replica processes (ingress + fan-out). @default 2 */
  replicas?: number;
  /** Messages per second each sender sends. @default 5 */
  ratePerSec?: number;
  /** Most messages of a room not yet handled by every member before its sender waits. @default 100 */
  maxOutstanding?: number;
  /** The resume bound (see the module comment). */
  boundMs: number;
  /**
   * How long after a fault nats-server may take to have leaders again for the streams, the lease
   * bucket and the consumers of the message path. @default 120000
   */
  jetstreamBackMs?: number;
  /** Seeds the choice of nodes (printed, so a run can be repeated). */
  seed?: number;
  /** Progress lines. */
  log?: (line: string) => void;
  /**
   * Copy every node's nats-server log and store, and every replica's output (at info level), here at
   * the end.
   */
  keepLogsIn?: string;
}

/** One injected fault. */
export interface ChaosEvent {
  kind: 'kill' | 'partition' | 'pause' | 'replica';
  /** Node (n1…n3) or replica id. */
  target: string;
  /** How: `kill -9`, `SIGTERM`, … */
  how: string;
  /** Start and end, ms after the run started. */
  startMs: number;
  endMs: number;
  /** When JetStream had leaders again for everything on the message path (ms after the run started). */
  backMs: number;
  /** Messages accepted while the fault lasted. */
  acceptedDuring: number;
  /**
   * Worst delay of a delivery handled after the fault ended and before the next fault began, from
   * the later of its acceptance and the fault's end (ms).
   */
  resumeMs: number;
  /**
   * Where the worst of those deliveries spent its time: when it was accepted, stored in the member's
   * inbox by the fan-out, and handled, in ms after the fault ended (negative: before).
   */
  worst?: { member: string; room: string; accepted: number; inboxed: number; handled: number };
}

/** What a chaos run measured. */
export interface ChaosReport {
  seed: number;
  boundMs: number;
  jetstreamBackMs: number;
  durationMs: number;
  events: ChaosEvent[];
  sent: number;
  accepted: number;
  /** Sends that failed for good (not accepted: the sender was told). */
  failed: number;
  /** First handlings of accepted messages, summed over members (each member counts once). */
  delivered: number;
  /** Handlings the SDK recovered from history after an inbox gap. */
  backfilled: number;
  /** Redeliveries the SDK reported (the handler may have run before). */
  redelivered: number;
  /** Holder changes of fan-out leases seen on the lease bucket. */
  leaseHandovers: number;
  /** Gaps in the lease watch (entries expired before it read them) and holder changes across them, unchecked. */
  leaseGaps: number;
  leaseUnchecked: number;
  /** Lease entries the watch passed over, read back from the stream before judging the write after them. */
  leaseRecovered: number;
  /** Inbox entries checked by the inbox watch. */
  inboxEntries: number;
  /** Inbox entries written after a hole the recipient had to backfill (see InboxChains). */
  inboxHoles: number;
  /** Inbox entries that went back below a position the room log lost (see InboxChains). */
  inboxRewinds: number;
  /** Every broken invariant, in the order it was seen. */
  violations: string[];
  /**
   * What JetStream itself broke (not Parley): room-log positions that no longer hold the message
   * acknowledged there or pushed to the fan-out from there, and sends a member handled twice under
   * two ids (the first copy pushed, then lost; the sender's retry stored as a new message). Reported,
   * not a violation: what else it does to members (a message never handled, a message id handled
   * twice or out of order) is one.
   */
  jetstreamDefects: string[];
  /** State of the cluster and the services when the first violation was seen. */
  diagnostics?: unknown;
}

interface ChaosMember {
  id: string;
  agent: Agent;
  /** room → last handled room position */
  last: Map<string, number>;
  /** room → handled message ids, in handling order */
  handled: Map<string, string[]>;
  /** accepted id → accepted at, not yet handled by this member */
  outstanding: Map<string, { room: string; acceptedAt: number; roomSeq: number }>;
  /** first handlings of accepted messages, for the resume figures */
  timings: { acceptedAt: number; handledAt: number; inboxedAt: number; room: string }[];
}

/** A small seeded generator (mulberry32): the same seed picks the same nodes. */
function random(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs the chaos scenario and returns what it measured (violations included: the caller fails on them). */
export async function runChaos(options: ChaosOptions): Promise<ChaosReport> {
  const o = { jetstreamBackMs: 120_000, ...options };
  const seed = o.seed ?? Math.floor(Math.random() * 2 ** 31);
  const rnd = random(seed);
  const log = o.log ?? (() => {});
  const replicaCount = o.replicas ?? 2;
  const rate = o.ratePerSec ?? 5;
  const maxOutstanding = o.maxOutstanding ?? 100;
  const partitions = new RoutePartitions();
  const violations: string[] = [];
  let diagnostics: unknown;
  const t0 = Date.now();
  const rel = (at: number) => at - t0;
  const violation = (what: string) => {
    violations.push(`+${(rel(Date.now()) / 1000).toFixed(1)} s: ${what}`);
    log(`VIOLATION ${what}`);
  };

  let parley: TestParley | undefined;
  let nc: NatsConnection | undefined;
  const replicas: (ServiceProcess | undefined)[] = [];
  const paused = new Set<number>();
  const stops: (() => unknown)[] = [];
  const replicaOutput: string[] = [];
  let sending = true;
  try {
    parley = await startParley({
      nodes: 3,
      routes: partitions.routes,
      // The control plane runs here; the message path runs in the replica processes, which the
      // `replica` faults restart.
      rooms: { PARLEY_INGRESS: false, PARLEY_FANOUT: false },
    });
    const cluster = parley.cluster as TestServer;
    const running = parley;
    const startReplica = (i: number) =>
      // Info: the fan-out's lease, worker and consumer changes, which the diagnostics quote.
      startRoomsProcess(running, `replica-${i}`, { LOG_LEVEL: 'info' });
    const clusterUp = rel(Date.now());
    // Independent of each other: started at once (one after the other cost the short form ~10 s).
    await Promise.all(
      Array.from({ length: replicaCount }, async (_, i) => {
        replicas[i] = await startReplica(i);
      }),
    );
    const replicasUp = rel(Date.now());
    nc = await cluster.connect();
    const jsm = await jetstreamManager(nc, { timeout: 5_000 });

    // Four members, three rooms: every member is in two rooms, every room has its own sender.
    const members: ChaosMember[] = await Promise.all(
      Array.from({ length: 4 }, async () => {
        const p = await running.participant();
        const agent = await running.connect(p.creds, { delivery: { includeOwn: true } });
        return {
          id: p.id,
          agent,
          last: new Map(),
          handled: new Map(),
          outstanding: new Map(),
          timings: [],
        };
      }),
    );
    const [m0, m1, m2, m3] = members as [ChaosMember, ChaosMember, ChaosMember, ChaosMember];
    const plan = [
      { sender: m0, members: [m0, m1, m2] },
      { sender: m1, members: [m1, m2, m3] },
      { sender: m3, members: [m3, m0] },
    ];
    const rooms = await Promise.all(
      plan.map(async (r, i) => {
        const others = r.members.filter((m) => m !== r.sender).map((m) => m.id);
        const room = await r.sender.agent.rooms.create(`chaos-${i}`, { members: others });
        return { id: room.id, ...r };
      }),
    );

    const order = new RoomOrder();
    /** The first message id each member handled each send's text under, and sends handled twice. */
    const texts = new Map<string, string>();
    const twice: string[] = [];
    let backfilled = 0;
    let redelivered = 0;
    const progress: (() => void)[] = [];
    for (const m of members) {
      m.agent.on('message', (d: Delivery) => {
        const at = Date.now();
        if (d.backfilled) backfilled++;
        if (d.redelivered) redelivered++;
        const broken = order.handled(m.id, d.room, d.roomSeq, d.message.id, d.rewound);
        if (broken) violation(broken);
        // Each send's text is unique: the same text under another id is one send handled twice.
        const text = d.message.parts.map((p) => (p.type === 'text' ? p.text : '')).join('');
        const firstId = texts.get(`${m.id}/${text}`);
        if (firstId === undefined) texts.set(`${m.id}/${text}`, d.message.id);
        else if (firstId !== d.message.id) twice.push(`${m.id}: "${text}" as ${firstId} and ${d.message.id}`);
        m.last.set(d.room, Math.max(m.last.get(d.room) ?? 0, d.roomSeq));
        const list = m.handled.get(d.room) ?? [];
        list.push(d.message.id);
        m.handled.set(d.room, list);
        const x = m.outstanding.get(d.message.id);
        if (x) {
          m.outstanding.delete(d.message.id);
          m.timings.push({
            acceptedAt: x.acceptedAt,
            handledAt: at,
            inboxedAt: d.inboxedAt ?? 0,
            room: d.room,
          });
        }
        for (const w of progress.splice(0)) w();
      });
      await m.agent.listening;
    }

    // The lease bucket: a holder change of `fanout.<p>` is legal only after the previous holder's
    // last write expired (a TTL old) or was deleted.
    // The bucket keeps one entry per key, so a watch that reads a little late would miss a release
    // (a delete) overwritten at once by the next holder's create, and see a handover without one:
    // the test keeps a few more entries per key (the leases read only the last; nothing else changes).
    const leaseStream = `KV_${buckets.leases}`;
    const leaseConfig = (await jsm.streams.info(leaseStream)).config;
    await jsm.streams.update(leaseStream, { ...leaseConfig, max_msgs_per_subject: 64 });
    const kv = await new Kvm(nc).open(buckets.leases);
    const ttlMs = (await kv.status()).ttl;
    const js = jetstream(nc);
    let watching = true;
    stops.push(() => {
      watching = false;
    });
    const keyPrefix = `$KV.${buckets.leases}.`;
    /** Lease entry `seq` from the stream, or why not (a stream just back from a fault may not answer). */
    const readBack = (seq: number): Promise<StoredMsg | string> =>
      retryJetStream('a lease entry', () => jsm.streams.getMessage(leaseStream, { seq }), {
        deadlineMs: 1_500,
        firstDelayMs: 500,
      }).then(
        (m) => m ?? 'not in the stream (expired)',
        (err: Error) => `not read (${err.message})`,
      );
    const leases = new LeaseHolders(ttlMs);
    // The bucket's entries expire a TTL after they were written (its stream's max age), the delete
    // of a handover included: a watcher away longer than that (JetStream without leaders for 10 s
    // after a kill -9) would see the next holder's create without the release before it and call
    // it a second holder (one long run: 8 such reports, every one 0.4–1.2 s after a logged give-back).
    // So a gap in what the watcher read drops what it knew; the inbox check below still sees two
    // writers, whatever the lease watch missed.
    void follow(
      js,
      leaseStream,
      `${keyPrefix}fanout.*`,
      () => watching,
      async (m) => {
        const key = m.subject.slice(keyPrefix.length);
        if (m.headers?.get('KV-Operation')) {
          leases.release(key, m.seq);
          return;
        }
        const holder = (m.json() as { replica?: string }).replica ?? '?';
        const expected = Number(m.headers?.get('Nats-Expected-Last-Subject-Sequence')) || undefined;
        // The write names the key's last entry when it was stored: one the watch did not read (a
        // fetch through a node kill can pass over entries) is read back before the write is judged.
        if (expected !== undefined && leases.missed(key, expected)) {
          const back = await readBack(expected);
          const entry = typeof back === 'string' || back.subject !== m.subject ? undefined : back;
          leases.recover(
            key,
            entry && {
              revision: expected,
              at: entry.time.getTime(),
              ...(entry.header?.get('KV-Operation')
                ? {}
                : { holder: (entry.json() as { replica?: string }).replica ?? '?' }),
            },
          );
          const what = typeof back === 'string' ? back : entry ? 'found' : `another subject: ${back.subject}`;
          log(`lease watch: ${key}'s entry ${expected} was passed over; read back: ${what}`);
        }
        const broken = leases.write(key, holder, m.info.timestampNanos / 1e6, m.seq, expected);
        if (broken) violation(broken);
      },
      {
        from: (await jsm.streams.info(leaseStream)).state.first_seq,
        gaps: {
          jsm,
          onGap: (from, first) => {
            log(`lease watch: entries ${from}–${first - 1} expired before it read them`);
            leases.gap();
          },
        },
      },
    );

    // The inbox stream: per (member, room) subject, room positions grow and each names the one before.
    const inbox = new InboxChains();
    /** The message the fan-out delivered from each room-log position (checked against the log at the end). */
    const fannedOut = new Map<number, string>();
    /** Where each message was written in each inbox subject (for the report of a message never handled). */
    const inboxed = new Map<string, string>();
    // The last inbox entry read per subject; a broken chain, with the entry it broke after: judged at
    // the end, as JetStream may have lost that entry (then the write after it is right).
    const lastRead = new Map<string, { seq: number; id: string | undefined }>();
    const brokenChains: { what: string; stream: string; after: { seq: number; id: string | undefined } }[] =
      [];
    for (const member of members)
      void follow(
        js,
        inboxStream(member.id),
        subjects.inboxAll(member.id),
        () => watching,
        (m) => {
          const roomSeq = Number(m.headers?.get(headerNames.roomSeq));
          const broken = inbox.entry(
            m.subject,
            roomSeq,
            Number(m.headers?.get(headerNames.prevSeq) || 0),
            Number(m.headers?.get(headerNames.rewound) || 0),
          );
          const id = m.headers?.get(headerNames.messageId);
          const after = lastRead.get(m.subject);
          if (broken && after) brokenChains.push({ what: broken, stream: inboxStream(member.id), after });
          else if (broken) violation(broken);
          lastRead.set(m.subject, { seq: m.seq, id });
          if (id && !fannedOut.has(roomSeq)) fannedOut.set(roomSeq, id);
          if (id) {
            const rewound = m.headers?.get(headerNames.rewound);
            const at = `inbox #${m.seq} (room #${roomSeq}${rewound ? `, rewound from #${rewound}` : ''})`;
            const key = `${m.subject} ${id}`;
            inboxed.set(key, inboxed.has(key) ? `${inboxed.get(key)}, ${at}` : at);
          }
        },
      );

    // Faults: the watchdog holds delivery to the bound only while no fault is in progress.
    let faultActive = false;
    let lastEnd = 0;
    const late = new Set<string>();
    // JetStream losing a leader of the message path again after it was back, outside a fault: seen
    // after a pause, an inbox stream without quorum for 20 s from 10 s after every leader was back
    // (nats-server 2.9.10). While that lasts nothing can be delivered through it, and the bound
    // counts again from when it is back: nats-server's recovery, reported, is not Parley's.
    let downSince = 0;
    let polling = false;
    const relapses = setInterval(() => {
      if (faultActive || polling || lastEnd === 0) return;
      polling = true;
      void jetstreamBack(jsm, members)
        .then((back) => {
          if (faultActive) return;
          const now = Date.now();
          if (!back && downSince === 0) downSince = now;
          if (back && downSince !== 0) {
            log(
              `+${(rel(downSince) / 1000).toFixed(1)} s JetStream lost a leader of the message path again, outside a fault, for ${now - downSince} ms: the bound counts from when it was back`,
            );
            lastEnd = now;
            downSince = 0;
          }
        })
        .finally(() => {
          polling = false;
        });
    }, 1_000);
    stops.push(() => clearInterval(relapses));
    const watchdog = setInterval(() => {
      if (faultActive || downSince !== 0) return;
      const now = Date.now();
      for (const m of members) {
        for (const [id, x] of m.outstanding) {
          const waited = now - Math.max(x.acceptedAt, lastEnd);
          if (waited > o.boundMs && !late.has(`${m.id}/${x.room}`)) {
            // One line per member and room: the first late message says it.
            late.add(`${m.id}/${x.room}`);
            violation(
              `${m.id} has not handled ${id} (${x.room}) ${waited} ms after ${x.acceptedAt > lastEnd ? 'it was accepted' : 'JetStream was back from the last fault'} (bound ${o.boundMs} ms)`,
            );
          }
        }
      }
    }, 250);
    stops.push(() => clearInterval(watchdog));

    // Senders: one per room, `rate` messages a second, each send retried by the SDK under its client
    // id until accepted or its deadline passes; a sender waits while its room has too many messages
    // not yet handled by every member (so a fault measures recovery, not a backlog).
    const countFor = (m: ChaosMember, room: string) => {
      let n = 0;
      for (const x of m.outstanding.values()) if (x.room === room) n++;
      return n;
    };
    let sent = 0;
    let failed = 0;
    const accepted: Map<string, string[]> = new Map(rooms.map((r) => [r.id, []]));
    /** The room-log position each accepted send was answered with. */
    const positions = new Map<string, number>();
    const senders = rooms.map(async (r) => {
      const room = r.sender.agent.rooms.room(r.id);
      let next = Date.now();
      for (let i = 0; sending; i++) {
        while (sending && r.members.some((m) => countFor(m, r.id) >= maxOutstanding))
          await new Promise<void>((w) => {
            progress.push(w);
            setTimeout(w, 1_000);
          });
        if (!sending) break;
        next += 1000 / rate;
        const wait = next - Date.now();
        // The pace of a sender, not a synchronisation: it sends at most `rate` a second.
        if (wait > 0) await sleep(wait);
        else next = Date.now();
        sent++;
        try {
          const reply = await room.send(`${r.id}:${i}`, { deadlineMs: 60_000 });
          const at = Date.now();
          accepted.get(r.id)?.push(reply.id);
          positions.set(reply.id, reply.roomSeq);
          // A member may already have handled it (the reply raced the delivery).
          for (const m of r.members)
            if (!(m.handled.get(r.id) ?? []).includes(reply.id))
              m.outstanding.set(reply.id, { room: r.id, acceptedAt: at, roomSeq: reply.roomSeq });
        } catch (err) {
          failed++;
          log(`send to ${r.id} failed: ${(err as Error).message}`);
        }
      }
    });

    // The schedule: kills interleaved with the other faults.
    type Step = ChaosEvent['kind'];
    const others: Step[] = [
      ...Array<Step>(o.partitions).fill('partition'),
      ...Array<Step>(o.pauses).fill('pause'),
      ...Array<Step>(o.replicaRounds).fill('replica'),
    ];
    const schedule: Step[] = [];
    for (let k = 0; k < Math.max(o.kills, others.length); k++) {
      if (k < o.kills) schedule.push('kill');
      const other = others[k];
      if (other) schedule.push(other);
    }
    const events: ChaosEvent[] = [];
    const acceptedTotal = () => [...accepted.values()].reduce((n, l) => n + l.length, 0);
    const node = () => Math.floor(rnd() * 3);
    // A fault begins once the previous one is over and every member handled what was accepted
    // before: each fault's resume figure is then its own.
    const settled = async () => {
      // …and a message accepted after the last fault reached every member: each fault's deliveries
      // are judged before the next one begins.
      await waitFor(
        () =>
          violations.length > 0 ||
          members.every((m) => m.outstanding.size === 0 && m.timings.some((d) => d.acceptedAt > lastEnd)),
        'every member to handle what was accepted',
        o.boundMs + 5_000,
      ).catch(() => {});
      await clusterWhole(jsm, members).catch((err: Error) => log(`cluster not whole: ${err.message}`));
    };
    const inFault = async (
      kind: Step,
      target: string,
      how: string,
      body: () => Promise<void>,
    ): Promise<void> => {
      const before = acceptedTotal();
      const start = Date.now();
      faultActive = true;
      log(
        `+${(rel(start) / 1000).toFixed(1)} s (${new Date(start).toISOString()}) ${kind} ${target} (${how})`,
      );
      let end = 0;
      try {
        await body();
        end = Date.now();
        // The bound holds from when JetStream has leaders again for everything on the message path:
        // how long nats-server takes for that is its own figure (and limit), not Parley's.
        await waitFor(
          () => jetstreamBack(jsm, members),
          'JetStream leaders for the room log, the inboxes, the leases and every consumer',
          o.jetstreamBackMs,
        ).catch((err: Error) => violation(`${err.message} after the ${kind} of ${target}`));
      } finally {
        lastEnd = Date.now();
        faultActive = false;
      }
      events.push({
        kind,
        target,
        how,
        startMs: rel(start),
        endMs: rel(end || lastEnd),
        backMs: rel(lastEnd),
        acceptedDuring: acceptedTotal() - before,
        resumeMs: 0,
      });
    };
    let lastKillAt = 0;
    let replicaTurn = 0;
    // Traffic first: the first fault hits a running message path.
    await waitFor(
      () => members.every((m) => m.timings.length >= 5) || violations.length > 0,
      'deliveries before the first fault',
      60_000,
    );
    log(
      `set up in ${(rel(Date.now()) / 1000).toFixed(1)} s: cluster and control plane ${(clusterUp / 1000).toFixed(1)} s, replicas ${((replicasUp - clusterUp) / 1000).toFixed(1)} s, agents, rooms and first deliveries ${((rel(Date.now()) - replicasUp) / 1000).toFixed(1)} s`,
    );
    for (const step of schedule) {
      if (violations.length > 0) break;
      await settled();
      if (violations.length > 0) break;
      if (step === 'kill') {
        const wait = lastKillAt + o.killEveryMs - Date.now();
        if (wait > 0) await sleep(wait);
        const i = node();
        lastKillAt = Date.now();
        await inFault('kill', `n${i + 1}`, 'kill -9, restart', async () => {
          await cluster.kill9(i);
          await cluster.restart(i);
        });
      } else if (step === 'partition') {
        const i = node();
        await inFault('partition', `n${i + 1}`, `routes cut ${o.partitionMs} ms`, async () => {
          partitions.cut(i);
          await sleep(o.partitionMs);
          partitions.heal(i);
        });
      } else if (step === 'pause') {
        const i = node();
        const pid = cluster.pid(i);
        if (!pid) throw new Error(`n${i + 1} is not running`);
        await inFault('pause', `n${i + 1}`, `SIGSTOP ${o.pauseMs} ms`, async () => {
          paused.add(pid);
          process.kill(pid, 'SIGSTOP');
          await sleep(o.pauseMs);
          process.kill(pid, 'SIGCONT');
          paused.delete(pid);
        });
      } else {
        for (let i = 0; i < Math.min(replicaCount, o.replicasPerRound ?? replicaCount); i++) {
          if (violations.length > 0) break;
          if (i > 0) await settled();
          const kill9First = (o.firstReplicaStop ?? 'kill -9') === 'kill -9';
          const how = (replicaTurn++ % 2 === 0) === kill9First ? 'kill -9' : 'SIGTERM';
          await inFault('replica', `replica-${i}`, `${how}, start`, async () => {
            if (how === 'kill -9') await replicas[i]?.kill9();
            else await replicas[i]?.stop();
            replicaOutput.push(`--- replica-${i} until ${how}\n${replicas[i]?.output() ?? ''}`);
            replicas[i] = await startReplica(i);
          });
        }
      }
    }
    if (violations.length === 0) await settled();
    if (violations.length > 0 && !diagnostics) diagnostics = await diagnose(jsm, kv, members, replicas);
    sending = false;
    await Promise.all(senders);
    // The end: whatever was accepted reaches every member (the watchdog still holds the bound).
    await waitFor(
      () => members.every((m) => m.outstanding.size === 0),
      () =>
        `every accepted message at every member: ${members.map((m) => `${m.id} misses ${m.outstanding.size}`).join(', ')}`,
      o.boundMs + 5_000,
    ).catch((err: Error) => {
      if (violations.length === 0) violation(err.message);
    });
    // The inbox watch must have read every entry a member handled, or its check did not cover the run.
    const behind = () =>
      members.flatMap((m) =>
        [...m.last]
          .filter(([room, seq]) => inbox.last(subjects.inbox(m.id, room)) < seq)
          .map(
            ([room, seq]) => `${m.id}/${room} read to ${inbox.last(subjects.inbox(m.id, room))} of ${seq}`,
          ),
      );
    await waitFor(
      () => behind().length === 0,
      () => `the inbox watch to catch up: ${behind().join(', ')}`,
      30_000,
    ).catch((err: Error) => violation(`${err.message} (the inbox check did not cover the run)`));
    if (violations.length > 0 && !diagnostics) diagnostics = await diagnose(jsm, kv, members, replicas);
    // Where a message that never arrived stopped: the room log must hold it at the position its
    // send was answered with; if it does not, JetStream acknowledged a write it then lost (what a
    // paused or partitioned stream leader can do), and nothing after the log could deliver it.
    const whereIs = async (id: string, room: string, seq: number, member: string) => {
      const stored = await jsm.streams.getMessage(streams.rooms, { seq }).then(
        (sm) => (sm ? ((sm.json() as { id?: string }).id === id ? 'held' : 'another message') : 'nothing'),
        (err: Error) =>
          /no message found|not found/i.test(err.message) ? 'nothing' : `unknown (${err.message})`,
      );
      const subject = subjects.inbox(member, room);
      const written = inboxed.get(`${subject} ${id}`);
      return `room log #${seq}: ${stored === 'held' ? 'holds it' : `holds ${stored} — an acknowledged write lost by JetStream`}; the member's inbox read to room #${inbox.last(subject)}; ${written ? `written at ${written}` : 'never written to the inbox'}`;
    };
    for (const m of members)
      for (const [id, x] of m.outstanding)
        violation(
          `${m.id} never handled accepted ${id} (${x.room}; ${await whereIs(id, x.room, x.roomSeq, m.id)})`,
        );
    // Every accepted message is still where JetStream acknowledged it: a position holding another
    // message means the room log lost an acknowledged write and went on from an earlier position
    // (what nats-server 2.9.10 was seen doing after a SIGSTOP of the stream's leader).
    // The same for every position the fan-out delivered: one holding another message now means
    // JetStream pushed the fan-out a room-log entry it then lost (never acknowledged to its sender,
    // whose retry was stored at a new position — behind the inbox cursors, which are by position).
    const logHolds = new Map<number, string>();
    const heldAt = async (seq: number) => {
      let held = logHolds.get(seq);
      if (held === undefined) {
        held = await jsm.streams.getMessage(streams.rooms, { seq }).then(
          (sm) => (sm?.json() as { id?: string } | undefined)?.id ?? 'nothing',
          () => 'nothing',
        );
        logHolds.set(seq, held);
      }
      return held;
    };
    const changed = async (entries: Iterable<[number, string]>) => {
      const out: string[] = [];
      for (const [seq, id] of entries) {
        const held = await heldAt(seq);
        if (held !== id) out.push(`#${seq} (${id} there, ${held} now)`);
      }
      return out;
    };
    const list = (xs: string[]) => `${xs.slice(0, 5).join(', ')}${xs.length > 5 ? ', …' : ''}`;
    const moved = await changed([...positions].map(([id, seq]) => [seq, id]));
    const jetstreamDefects: string[] = [];
    if (moved.length > 0)
      jetstreamDefects.push(`JetStream lost ${moved.length} acknowledged room-log writes: ${list(moved)}`);
    const vanished = await changed(fannedOut);
    if (vanished.length > 0)
      jetstreamDefects.push(
        `JetStream pushed the fan-out ${vanished.length} room-log entries it no longer holds: ${list(vanished)}`,
      );
    if (leases.superseded.length > 0)
      jetstreamDefects.push(
        `JetStream stored ${leases.superseded.length} lease writes conditional on a revision that was no longer the last (nats-server #4320; the superseded holder did not write again): ${list(leases.superseded)}`,
      );
    if (twice.length > 0)
      jetstreamDefects.push(
        `${twice.length} handlings of a send a member had handled under another id (its first copy lost by JetStream, its retry stored anew): ${list(twice)}`,
      );
    // A broken inbox chain is two writers, unless the inbox stream no longer holds the entry the
    // chain broke after: JetStream lost that write (an inbox stream's leader paused or cut off) and
    // the fan-out, reading the subject's last entry again, went on from the one before it.
    const lostInbox: string[] = [];
    for (const b of brokenChains) {
      const held = await jsm.streams.getMessage(b.stream, { seq: b.after.seq }).then(
        (sm) => (sm ? sm.header.get(headerNames.messageId) || 'no message id' : 'nothing'),
        () => undefined,
      );
      if (held === undefined || held === b.after.id) violation(b.what);
      else lostInbox.push(`${b.what} (${b.stream} #${b.after.seq}: ${b.after.id} there, ${held} now)`);
    }
    if (lostInbox.length > 0)
      jetstreamDefects.push(
        `JetStream lost ${lostInbox.length} inbox entries the fan-out had written, which it then wrote past: ${list(lostInbox)}`,
      );
    for (const d of jetstreamDefects) log(`JETSTREAM DEFECT ${d}`);

    let delivered = 0;
    for (const r of rooms) {
      const ids = new Set(accepted.get(r.id));
      for (const m of r.members) delivered += (m.handled.get(r.id) ?? []).filter((id) => ids.has(id)).length;
    }
    // Resume figures: each delivery handled outside every fault counts for the last fault before it.
    const timings = members.flatMap((m) => m.timings.map((d) => ({ ...d, member: m.id })));
    for (const [i, e] of events.entries()) {
      const end = t0 + e.backMs;
      const until = t0 + (events[i + 1]?.startMs ?? Number.POSITIVE_INFINITY);
      for (const d of timings) {
        const delay = d.handledAt - Math.max(d.acceptedAt, end);
        if (d.handledAt >= end && d.handledAt < until && (delay > e.resumeMs || !e.worst)) {
          e.resumeMs = delay;
          e.worst = {
            member: d.member,
            room: d.room,
            accepted: d.acceptedAt - end,
            inboxed: d.inboxedAt ? d.inboxedAt - end : Number.NaN,
            handled: d.handledAt - end,
          };
        }
      }
    }
    return {
      seed,
      boundMs: o.boundMs,
      jetstreamBackMs: o.jetstreamBackMs,
      durationMs: Date.now() - t0,
      events,
      sent,
      accepted: acceptedTotal(),
      failed,
      delivered,
      backfilled,
      redelivered,
      leaseHandovers: leases.handovers,
      leaseGaps: leases.gaps,
      leaseRecovered: leases.recovered,
      leaseUnchecked: leases.unchecked,
      inboxEntries: inbox.entries,
      inboxHoles: inbox.holes,
      inboxRewinds: inbox.rewinds,
      violations,
      jetstreamDefects,
      ...(diagnostics ? { diagnostics } : {}),
    };
  } finally {
    sending = false;
    for (const pid of paused)
      try {
        process.kill(pid, 'SIGCONT');
      } catch {}
    for (const s of stops) await Promise.resolve(s()).catch(() => {});
    await Promise.allSettled(replicas.map((r) => r?.kill9()));
    if (o.keepLogsIn && parley?.cluster) {
      await mkdir(o.keepLogsIn, { recursive: true });
      for (let i = 0; i < 3; i++)
        await copyFile(
          join(parley.cluster.dir, `n${i + 1}`, 'nats-server.log'),
          join(o.keepLogsIn, `n${i + 1}.log`),
        ).catch(() => {});
      // The nodes' stores too (after the replicas stopped): which replica holds which entry.
      await cp(parley.cluster.dir, join(o.keepLogsIn, 'cluster'), { recursive: true }).catch(() => {});
      const last = replicas.map((r, i) => `--- replica-${i} (last run)\n${r?.output() ?? ''}`);
      await writeFile(join(o.keepLogsIn, 'replicas.log'), [...replicaOutput, ...last].join('\n'));
    }
    await nc?.close().catch(() => {});
    await parley?.destroy();
    await partitions.close();
  }
}

/** The inbox streams the members' inboxes are in. */
const inboxStreamsOf = (members: ChaosMember[]) => [...new Set(members.map((m) => inboxStream(m.id)))];

/** True when the streams, the lease bucket and every consumer of the message path have a leader. */
async function jetstreamBack(
  jsm: Awaited<ReturnType<typeof jetstreamManager>>,
  members: ChaosMember[],
): Promise<boolean> {
  try {
    for (const name of [streams.rooms, ...inboxStreamsOf(members), `KV_${buckets.leases}`])
      if (!(await jsm.streams.info(name)).cluster?.leader) return false;
    const fanout = await jsm.consumers.list(streams.rooms).next();
    if (fanout.length === 0 || !fanout.every((c) => c.cluster?.leader)) return false;
    for (const m of members)
      if (!(await jsm.consumers.info(inboxStream(m.id), m.id)).cluster?.leader) return false;
    return true;
  } catch {
    return false;
  }
}

/** Waits until every stream's replicas are current (a restarted or healed node caught up). */
async function clusterWhole(
  jsm: Awaited<ReturnType<typeof jetstreamManager>>,
  members: ChaosMember[],
): Promise<void> {
  await waitFor(
    async () => {
      try {
        for (const name of [streams.rooms, ...inboxStreamsOf(members)]) {
          const info = await jsm.streams.info(name);
          const reps = info.cluster?.replicas ?? [];
          if (!info.cluster?.leader || reps.length !== 2 || !reps.every((r) => r.current && !r.offline))
            return false;
        }
        return true;
      } catch {
        return false;
      }
    },
    'every stream replica current',
    60_000,
  );
}

/** Where deliveries stand: fan-out consumers, members' inbox consumers, lease holders, replica logs. */
async function diagnose(
  jsm: Awaited<ReturnType<typeof jetstreamManager>>,
  kv: Awaited<ReturnType<Kvm['open']>>,
  members: ChaosMember[],
  replicas: (ServiceProcess | undefined)[],
): Promise<unknown> {
  const state = async (what: () => Promise<unknown>) => what().catch((e: Error) => `error: ${e.message}`);
  const consumers = await jsm.consumers
    .list(streams.rooms)
    .next()
    .catch(() => []);
  /** Partitions with entries pushed and not acknowledged, or not pushed yet. */
  const stuck = consumers
    .filter((c) => c.num_ack_pending > 0 || c.num_pending > 0)
    .map((c) => Number(c.name.split('_')[1]));
  return {
    fanout: await state(async () =>
      consumers.map((c) => ({
        name: c.name,
        pending: c.num_pending,
        ackPending: c.num_ack_pending,
        redelivered: c.num_redelivered,
        delivered: c.delivered.stream_seq,
        ackFloor: c.ack_floor.stream_seq,
        created: c.created,
        leader: c.cluster?.leader,
        push: c.push_bound ?? false,
        deliverTo: c.config.deliver_subject,
      })),
    ),
    inboxConsumers: await Promise.all(
      members.map((m) =>
        state(async () => {
          const c = await jsm.consumers.info(inboxStream(m.id), m.id);
          return {
            member: m.id,
            outstanding: m.outstanding.size,
            pending: c.num_pending,
            ackPending: c.num_ack_pending,
            delivered: c.delivered.stream_seq,
            ackFloor: c.ack_floor.stream_seq,
            leader: c.cluster?.leader,
            push: c.push_bound ?? false,
          };
        }),
      ),
    ),
    leases: await state(async () => {
      const out: Record<string, string> = {};
      for await (const k of await kv.keys('fanout.*')) {
        const e = await kv.get(k);
        if (e) out[k] = `${e.string()} @${e.created.toISOString()}`;
      }
      return out;
    }),
    streams: await state(async () =>
      Promise.all(
        [streams.rooms, ...inboxStreamsOf(members)].map(async (n) => {
          const i = await jsm.streams.info(n);
          return {
            stream: n,
            messages: i.state.messages,
            leader: i.cluster?.leader,
            replicas: i.cluster?.replicas,
          };
        }),
      ),
    ),
    // The last warnings of each replica, and its fan-out lines about a partition with entries not yet
    // acknowledged (what happened to the partition that holds what did not arrive).
    replicaLogs: replicas.map((r) => {
      const lines = (r?.output() ?? '').split('\n');
      const warnings = lines.filter((l) => /"level":[56]0/.test(l) || /"level":40/.test(l)).slice(-15);
      const held = new Set(stuck.map((p) => `"partition":${p},`));
      const about = lines.filter((l) => [...held].some((h) => l.includes(h))).slice(-40);
      const at = (l: string) => /"time":"([^"]+)"/.exec(l)?.[1] ?? '';
      return [...new Set([...about, ...warnings])].sort((a, b) => at(a).localeCompare(at(b))).join('\n');
    }),
  };
}

/** The events and figures as a table (Markdown-ish, for a terminal and the notes). */
export function formatReport(r: ChaosReport): string {
  const rows = [
    '| # | fault | target | how | start s | lasted ms | JetStream back after ms | accepted during | resume ms | worst: accepted / inboxed / handled ms after JetStream was back |',
    '| - | - | - | - | - | - | - | - | - | - |',
    ...r.events.map(
      (e, i) =>
        `| ${i + 1} | ${e.kind} | ${e.target} | ${e.how} | ${(e.startMs / 1000).toFixed(1)} | ${e.endMs - e.startMs} | ${e.backMs - e.endMs} | ${e.acceptedDuring} | ${e.resumeMs} | ${e.worst ? `${e.worst.accepted} / ${e.worst.inboxed} / ${e.worst.handled}` : '-'} |`,
    ),
  ];
  const worst = new Map<string, number>();
  const back = new Map<string, number>();
  const count = new Map<string, number>();
  for (const e of r.events) {
    worst.set(e.kind, Math.max(worst.get(e.kind) ?? 0, e.resumeMs));
    back.set(e.kind, Math.max(back.get(e.kind) ?? 0, e.backMs - e.endMs));
    count.set(e.kind, (count.get(e.kind) ?? 0) + 1);
  }
  return [
    ...rows,
    '',
    `faults: ${[...count].map(([k, n]) => `${n} ${k}`).join(', ')}; worst resume: ${[...worst].map(([k, ms]) => `${k} ${ms} ms`).join(', ')} (bound ${r.boundMs} ms); JetStream back after at worst: ${[...back].map(([k, ms]) => `${k} ${ms} ms`).join(', ')}`,
    `messages: ${r.sent} sent, ${r.accepted} accepted, ${r.failed} failed, ${r.delivered} deliveries of accepted messages (${r.backfilled} backfilled, ${r.redelivered} redelivered); ${r.inboxEntries} inbox entries checked (${r.inboxHoles} after a hole, ${r.inboxRewinds} going back below a position the room log lost), ${r.leaseHandovers} lease handovers (${r.leaseUnchecked} more across ${r.leaseGaps} gaps of the lease watch, unchecked; ${r.leaseRecovered} entries the watch passed over read back); seed ${r.seed}; ${(r.durationMs / 1000).toFixed(0)} s`,
    r.violations.length === 0
      ? 'invariants: held'
      : `invariants: ${r.violations.length} violations\n${r.violations.map((v) => `  ${v}`).join('\n')}`,
    ...(r.jetstreamDefects.length > 0
      ? [
          `JetStream defects (not Parley's; see docs/operations.md):\n${r.jetstreamDefects.map((d) => `  ${d}`).join('\n')}`,
        ]
      : []),
  ].join('\n');
}

/** The git commit a report was measured at (for the --json output). */
export function commit(): string {
  return spawnSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).stdout.trim();
}
