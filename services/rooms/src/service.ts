import { jetstream } from '@nats-io/jetstream';
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import {
  buckets,
  losesConsumerState,
  ParleyError,
  RoomMessage,
  roomsApi,
  serviceId,
  subjects,
  tasksApi,
} from '@parley/contracts';
import {
  bind,
  createDelegationVerifier,
  createMicroService,
  type DelegationVerifier,
  JsPublisher,
  jetstreamManagerReady,
  type Logger,
  type MicroService,
  type ParleyService,
  packageVersion,
  type ServiceResponder,
  type ServiceTelemetry,
  serveApis,
  startKvm,
} from '@parley/kit';
import type { RoomsConfig } from './config.js';
import { createConsentGate } from './consent.js';
import { createControlPlane } from './control.js';
import { createDeadLetters } from './dlq.js';
import { createFanout, type FanoutConnection } from './fanout.js';
import { delegationGuard } from './guards/delegation.js';
import { type IngressReplicas, trackIngressReplicas } from './guards/ingress-replicas.js';
import { rateLimitGuard } from './guards/rate-limit.js';
import { roomPausedGuard } from './guards/room-paused.js';
import { attachInbox } from './inbox-attach.js';
import { type InboxFloors, shardsOf, startInboxFloors } from './inbox-floors.js';
import { type SendGuard, serveIngress } from './ingress.js';
import { createNotices } from './notices.js';
import { createOwnerView } from './owner-view.js';
import { createParticipantDirectory } from './participants.js';
import { createPolicyCache, type PolicyCache } from './policy-cache.js';
import { createRoomCache, type RoomCache } from './room-cache.js';
import { findMessage } from './room-log.js';
import { createRunawayDetector } from './runaway.js';
import { createTasks } from './tasks/tasks.js';

/** What the rooms service needs. */
export interface RoomsDeps extends ServiceTelemetry, ServiceResponder {
  nc: NatsConnection;
  /**
   * Opens another connection with the service's credentials (named after `purpose`): the fan-out
   * gets its own, so its inbox writes never queue behind the ingress on one socket. Without it the
   * fan-out shares `nc`.
   */
  connect?: (purpose: string) => Promise<NatsConnection>;
  log: Logger;
  config: RoomsConfig;
}

/** The rooms service: room lifecycle and membership, the ingress and the fan-out. */
export function createRoomsService(deps: RoomsDeps): ParleyService & {
  ownedPartitions(): number[];
  unheldPartitions(): number[];
  stuckPartitions(): number[];
} {
  const { config } = deps;
  const log = deps.log.child({ component: 'rooms' });
  let micro: MicroService | undefined;
  let cache: RoomCache | undefined;
  let policy: PolicyCache | undefined;
  let deregistrations: Subscription | undefined;
  let fanout: ReturnType<typeof createFanout> | undefined;
  let floors: InboxFloors | undefined;
  let deadLetters: ReturnType<typeof createDeadLetters> | undefined;
  let verifier: DelegationVerifier | undefined;
  let replicas: IngressReplicas | undefined;
  let tasks: ReturnType<typeof createTasks> | undefined;
  let started = false;
  const ownConnections: NatsConnection[] = [];
  const publishers: JsPublisher[] = [];

  const replyPrefix = subjects.replyPrefix(serviceId('rooms'));

  // What start() waits for (see ParleyService.starting).
  let step: string | undefined = 'JetStream';
  return {
    name: 'rooms',
    starting: () => step,
    async start() {
      const js = jetstream(deps.nc);
      const jsm = await jetstreamManagerReady(deps.nc, { log });
      step = 'the rooms, leases and policy buckets';
      const kvm = startKvm(deps.nc, { log });
      const rooms = await kvm.open(buckets.rooms);
      const leases = await kvm.open(buckets.leases);
      const participants = createParticipantDirectory(jsm);
      // A deregistered participant's inbox is gone: stop treating it as known.
      deregistrations = deps.nc.subscribe(subjects.event('registry', 'agent.deregistered'), {
        callback: (err, msg) => {
          if (err) return;
          const id = msg.json<{ subject?: string }>().subject ?? '';
          participants.forget(id);
          floors?.forget(id);
        },
      });
      const control = createControlPlane({
        js,
        jsm,
        kv: rooms,
        partitions: config.PARLEY_PARTITIONS,
        participants,
        consent: createConsentGate({ nc: deps.nc, tracer: deps.tracer, metrics: deps.metrics }),
        log,
      });
      const notices = createNotices({
        js,
        jsm,
        kv: rooms,
        partitions: config.PARLEY_PARTITIONS,
        participants,
      });
      const policyKv = await kvm.open(buckets.policy);
      step = 'the inbox floors';
      // Recorded by the replica holding each shard's fan-out partition (none until it holds one).
      const floorsKv = await kvm.open(buckets.floors);
      // Recorded only where the server can lose a consumer's state (the one this replica is
      // connected to at start); read at every attach, wherever they came from.
      const recordFloors = losesConsumerState(deps.nc.info?.version);
      floors = await startInboxFloors({
        jsm,
        kv: floorsKv,
        shards: () => shardsOf(fanout?.owned() ?? [], config.PARLEY_PARTITIONS),
        everyMs: recordFloors ? config.PARLEY_INBOX_FLOORS_MS : 0,
        log,
      });
      step = 'the policy view';
      // One standing view for the API (serveApis) and the ingress: suspended means suspended everywhere.
      const standing = await createPolicyCache(policyKv, log, deps.metrics);
      policy = standing;
      const ownerView = createOwnerView({ nc: deps.nc, js, control, tracer: deps.tracer });
      micro = createMicroService(deps.responder ?? deps.nc, {
        name: 'parley-rooms',
        version: packageVersion(import.meta.url),
        description: 'Rooms, membership, the message ingress and the fan-out.',
        metadata: { replica: config.PARLEY_REPLICA_ID },
      });
      serveApis(
        micro,
        [
          bind(roomsApi.create, (req, ctx) => control.create(req, ctx.caller)),
          bind(roomsApi.get, (req, ctx) => control.get(req, ctx.caller)),
          bind(roomsApi.list, (req, ctx) => control.list(req, ctx.caller)),
          bind(roomsApi.invite, (req, ctx) => control.invite(req, ctx.caller)),
          bind(roomsApi.join, (req, ctx) => control.join(req, ctx.caller)),
          bind(roomsApi.leave, (req, ctx) => control.leave(req, ctx.caller)),
          bind(roomsApi.remove, (req, ctx) => control.remove(req, ctx.caller)),
          bind(roomsApi.setMember, (req, ctx) => control.setMember(req, ctx.caller)),
          bind(roomsApi.close, (req, ctx) => control.close(req, ctx.caller)),
          bind(roomsApi.history, (req, ctx) => control.history(req, ctx.caller)),
          bind(roomsApi.pause, (req, ctx) => control.pause(req, ctx.caller)),
          bind(roomsApi.resume, (req, ctx) => control.resume(req, ctx.caller)),
          bind(roomsApi.ownerRooms, (req, ctx) => ownerView.ownerRooms(req, ctx.caller)),
          bind(roomsApi.ownerRead, (req, ctx) => ownerView.ownerRead(req, ctx.caller)),
          bind(roomsApi.members, (req) => control.members(req)),
          bind(roomsApi.findMessage, async (req) => {
            const found = await findMessage(js, jsm, req.id);
            if (!found) throw new ParleyError('NOT_FOUND', `no message ${req.id} in the room log`);
            const message = RoomMessage.parse(JSON.parse(new TextDecoder().decode(found.data)));
            return {
              seq: found.seq,
              message,
              ...(req.readers ? { readers: await control.readersOf(message, found.seq, req.readers) } : {}),
            };
          }),
          bind(roomsApi.notify, (req, ctx) => notices.notify(req, ctx.caller)),
          bind(roomsApi.contactRevoked, (req) => control.contactRevoked(req)),
          bind(roomsApi.attachInbox, (req, ctx) =>
            attachInbox({ jsm, log, floors }, ctx.caller, req.session, req.resumeAfter),
          ),
        ],
        { service: 'rooms', queue: 'rooms', log, tracer: deps.tracer, metrics: deps.metrics, standing },
      );
      if (config.PARLEY_TASKS) {
        step = 'tasks';
        // Tasks live here, beside the room log they announce every transition in (docs/architecture.md, "Tasks").
        const t = createTasks({
          js,
          kv: await kvm.open(buckets.tasks),
          rooms,
          notify: (req, caller) => notices.notify(req, caller),
          log: log.child({ component: 'tasks' }),
          sweepMs: config.PARLEY_TASK_SWEEP_MS,
        });
        await t.start();
        tasks = t;
        serveApis(
          micro,
          [
            bind(tasksApi.create, (req, ctx) => t.create(req, ctx.caller)),
            bind(tasksApi.get, (req, ctx) => t.get(req, ctx.caller)),
            bind(tasksApi.list, (req, ctx) => t.list(req, ctx.caller)),
            bind(tasksApi.transition, (req, ctx) => t.transition(req, ctx.caller)),
            bind(tasksApi.heartbeat, (req, ctx) => t.heartbeat(req, ctx.caller)),
            bind(tasksApi.reassign, (req, ctx) => t.reassign(req, ctx.caller)),
            bind(tasksApi.effect, (req, ctx) => t.effect(req, ctx.caller)),
            bind(tasksApi.compensation, (req, ctx) => t.compensation(req, ctx.caller)),
            bind(tasksApi.bind, (req, ctx) => t.bind(req, ctx.caller)),
            bind(tasksApi.findBinding, (req, ctx) => t.findBinding(req, ctx.caller)),
            bind(tasksApi.saveCheckpoint, (req, ctx) => t.saveCheckpoint(req, ctx.caller)),
            bind(tasksApi.loadCheckpoint, (req, ctx) => t.loadCheckpoint(req, ctx.caller)),
            bind(tasksApi.usage, (req) => t.usage(req)),
          ],
          { service: 'tasks', queue: 'tasks', log, tracer: deps.tracer, metrics: deps.metrics, standing },
        );
      }
      if (config.PARLEY_INGRESS) {
        step = 'the ingress: the room cache';
        cache = await createRoomCache(rooms, log);
        step = 'the ingress: the delegation verifier';
        verifier = await createDelegationVerifier(policyKv, log);
        step = 'the ingress: the replica count';
        replicas = await trackIngressReplicas({
          kv: leases,
          replicaId: config.PARLEY_REPLICA_ID,
          ttlMs: config.PARLEY_LEASE_TTL_MS,
          log,
        });
        // Cheapest first: a paused room or a flood is refused before a signature is checked.
        const guards: SendGuard[] = !config.PARLEY_SEND_GUARDS
          ? []
          : [
              roomPausedGuard({ metrics: deps.metrics }),
              rateLimitGuard({
                agent: {
                  ratePerSec: config.PARLEY_RATE_AGENT_PER_SEC,
                  burst: config.PARLEY_RATE_AGENT_BURST,
                },
                room: { ratePerSec: config.PARLEY_RATE_ROOM_PER_SEC, burst: config.PARLEY_RATE_ROOM_BURST },
                replicas,
                metrics: deps.metrics,
              }),
              delegationGuard({ verifier, policy, js, log, metrics: deps.metrics }),
            ];
        const publisher = new JsPublisher(deps.nc, replyPrefix);
        await publisher.start();
        publishers.push(publisher);
        serveIngress(micro, {
          publisher,
          jsm,
          rooms: cache,
          policy,
          guards,
          log,
          ...(deps.tracer ? { tracer: deps.tracer } : {}),
          ...(deps.metrics ? { metrics: deps.metrics } : {}),
          maxMessageBytes: config.PARLEY_MAX_MESSAGE_BYTES,
          hopLimit: config.PARLEY_HOP_LIMIT,
        });
      }
      if (config.PARLEY_FANOUT) {
        const connections: FanoutConnection[] = [];
        for (let i = 0; deps.connect && i < config.PARLEY_FANOUT_CONNECTIONS; i++) {
          step = `the fan-out: connection ${i}`;
          const fnc = await deps.connect(`fanout-${i}`);
          ownConnections.push(fnc);
          const publisher = new JsPublisher(fnc, replyPrefix);
          await publisher.start();
          publishers.push(publisher);
          connections.push({
            nc: fnc,
            js: jetstream(fnc),
            jsm: await jetstreamManagerReady(fnc, { log }),
            publisher,
          });
        }
        if (connections.length === 0) {
          const publisher = new JsPublisher(deps.nc, replyPrefix);
          await publisher.start();
          publishers.push(publisher);
          connections.push({ nc: deps.nc, js, jsm, publisher });
        }
        fanout = createFanout({
          ...(deps.tracer ? { tracer: deps.tracer } : {}),
          ...(deps.metrics ? { metrics: deps.metrics } : {}),
          jsm,
          connections,
          rooms,
          leases,
          partitions: config.PARLEY_PARTITIONS,
          replicaId: config.PARLEY_REPLICA_ID,
          leaseTtlMs: config.PARLEY_LEASE_TTL_MS,
          stuckAfterMs: config.PARLEY_FANOUT_STUCK_MS,
          batchSize: config.PARLEY_FANOUT_BATCH,
          log,
          ...(config.PARLEY_RUNAWAY_MESSAGES > 0
            ? {
                observe: createRunawayDetector({
                  messages: config.PARLEY_RUNAWAY_MESSAGES,
                  windowMs: config.PARLEY_RUNAWAY_WINDOW_MS,
                  onTrip: (room, info) => {
                    const reason = `runaway: ${info.messages} agent messages within ${Math.round(info.windowMs / 1000)} s and no human message`;
                    log.warn({ room, ...info }, 'runaway detected: pausing the room for agents');
                    void control
                      .pause({ room, reason }, 'svc_rooms', {
                        msgId: `runaway:${room}:${info.seq}`,
                        data: { detector: 'runaway', agents: info.agents, atSeq: info.seq },
                      })
                      .catch((err) => log.error({ err, room }, 'runaway room not paused'));
                  },
                }).observe,
              }
            : {}),
        });
        // Both at once: on a 3-node cluster each waits for Raft elections of consumers it makes
        // (the fan-out's leases 0.25–0.34 s, the dead-letter worker 0.47 s, one after the other).
        step = 'the fan-out (its leases) and the dead-letter worker';
        deadLetters = createDeadLetters({
          js,
          jsm,
          partitions: config.PARLEY_PARTITIONS,
          log,
          floors: recordFloors ? floorsKv : undefined,
        });
        const both = await Promise.allSettled([fanout.start(), deadLetters.start()]);
        for (const r of both) if (r.status === 'rejected') throw r.reason;
      }
      step = undefined;
      started = true;
    },
    async stop() {
      started = false;
      await micro?.stop();
      tasks?.stop();
      await deadLetters?.stop();
      await fanout?.stop();
      floors?.stop();
      for (const p of publishers.splice(0)) p.close();
      await Promise.allSettled(ownConnections.splice(0).map((c) => c.drain()));
      await cache?.stop();
      await replicas?.stop();
      verifier?.stop();
      policy?.stop();
      deregistrations?.unsubscribe();
    },
    ready: () => started,
    // Every partition with entries waiting has a live holder (any replica's view of the leases), and
    // none held here is stuck while the backbone answers (see the fan-out's `healthy`).
    checks: { fanout: () => fanout?.healthy() ?? true },
    ownedPartitions: () => fanout?.owned() ?? [],
    unheldPartitions: () => fanout?.unheld() ?? [],
    stuckPartitions: () => fanout?.stuck() ?? [],
  };
}
