import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  type JetStreamManager,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
  type StreamConfig,
} from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { Objm } from '@nats-io/obj';
import { type NatsConnection, nanos } from '@nats-io/transport-node';
import {
  type BackboneOptions,
  inboxConsumer,
  isParticipantId,
  kvDefinitions,
  objectStores,
  type StreamDefinition,
  streamDefinitions,
} from '@parley/contracts';
import type { Logger } from 'pino';
import { retryJetStream } from './jetstream-ready.js';
import { isConsumerNotFound, isStreamExists, isStreamNotFound } from './nats-errors.js';

function toStreamConfig(d: StreamDefinition): Partial<StreamConfig> & { name: string } {
  return {
    name: d.name,
    description: d.description,
    subjects: d.subjects,
    retention:
      d.retention === 'interest'
        ? RetentionPolicy.Interest
        : d.retention === 'workqueue'
          ? RetentionPolicy.Workqueue
          : RetentionPolicy.Limits,
    storage: d.storage === 'memory' ? StorageType.Memory : StorageType.File,
    num_replicas: d.replicas,
    max_age: nanos(d.maxAgeMs),
    max_msgs_per_subject: d.maxMsgsPerSubject ?? -1,
    max_bytes: d.maxBytes || -1,
    duplicate_window: nanos(d.duplicateWindowMs),
    deny_delete: d.denyDelete,
    deny_purge: d.denyPurge,
    allow_direct: d.allowDirect,
    discard: d.discard === 'new' ? DiscardPolicy.New : DiscardPolicy.Old,
  };
}

const SETTABLE: (keyof StreamConfig)[] = [
  'description',
  'subjects',
  'max_age',
  'max_msgs_per_subject',
  'max_bytes',
  'discard',
  'duplicate_window',
  'deny_delete',
  'deny_purge',
  'allow_direct',
  'num_replicas',
];

/** What {@link ensureBackbone} created or found. */
export interface BackboneReport {
  streams: { name: string; action: 'created' | 'updated' | 'unchanged' }[];
  buckets: string[];
  /** Inbox consumers made in the inbox shards for participants of the pre-shard `PARLEY_INBOX`. */
  movedInboxes?: number;
}

/** How long one JetStream API call of the backbone setup may take. */
const SETUP_TIMEOUT_MS = 30_000;

/**
 * Creates every stream, KV bucket and object store Parley needs, or brings existing ones to the
 * configured settings. Idempotent: run it at every start, from any number of replicas at once.
 * While JetStream does not answer yet (a cluster electing its meta leader, a node restarting) the
 * whole setup is tried again, for up to 90 s (then a clear error: see jetstream-ready.ts).
 */
export async function ensureBackbone(
  nc: NatsConnection,
  options: BackboneOptions,
  log: Logger,
): Promise<BackboneReport> {
  const deadline = Date.now() + 90_000;
  // A quick probe first: without a meta leader a setup call only times out after SETUP_TIMEOUT_MS.
  const probe = await jetstreamManager(nc, { checkAPI: false, timeout: 5_000 });
  await retryJetStream('the JetStream account info', () => probe.getAccountInfo(), {
    log,
    deadlineMs: 90_000,
  });
  return retryJetStream('the backbone setup', () => ensureBackboneOnce(nc, options, log), {
    log,
    deadlineMs: Math.max(1_000, deadline - Date.now()),
  });
}

async function ensureBackboneOnce(
  nc: NatsConnection,
  options: BackboneOptions,
  log: Logger,
): Promise<BackboneReport> {
  // Creating replicated streams elects a Raft group per stream: on a busy cluster one call can
  // take longer than the client's 5 s default, and a start that gives up then only starts again.
  const jsm = await jetstreamManager(nc, { timeout: SETUP_TIMEOUT_MS });
  const kvm = new Kvm(jsm.jetstream());
  const objm = new Objm(jsm.jetstream());
  // All at once: on a 3-node cluster each replicated stream waits for its own Raft group's
  // election (~0.4 s each on 2.9.10), so one after the other the 18 of them took ~7 s per start.
  const [streams, kvBuckets, objBuckets] = await Promise.all([
    Promise.all(streamDefinitions(options).map((def) => ensureStream(jsm, def, log))),
    Promise.all(
      kvDefinitions(options).map(async (def) => {
        await kvm.create(def.bucket, {
          description: def.description,
          history: def.history,
          replicas: def.replicas,
          maxValueSize: def.maxValueSize,
          ...(def.ttlMs ? { ttl: def.ttlMs } : {}),
        });
        return def.bucket;
      }),
    ),
    Promise.all(
      Object.values(objectStores).map(async (bucket) => {
        await objm.create(bucket, {
          description: 'Artifacts referenced from file parts.',
          replicas: options.replicas ?? 1,
        });
        return bucket;
      }),
    ),
  ]);
  const movedInboxes = await moveLegacyInboxes(jsm, options, log);
  return { streams, buckets: [...kvBuckets, ...objBuckets], ...(movedInboxes ? { movedInboxes } : {}) };
}

/** The one inbox stream of versions before the inbox shards. */
export const LEGACY_INBOX_STREAM = 'PARLEY_INBOX';

/**
 * A deployment made before the inbox shards has its participants' inbox consumers in the one
 * `PARLEY_INBOX` stream: each gets its consumer in its shard's stream, so nobody registered before
 * the upgrade is unknown after it. What waited unread in the old stream is not copied: the first
 * entry in the new inbox names the room position before it, and the SDK reads what it did not handle
 * from room history. The old stream and its consumers are left for the operator to remove. Returns
 * how many consumers were made.
 */
async function moveLegacyInboxes(
  jsm: JetStreamManager,
  options: BackboneOptions,
  log: Logger,
): Promise<number> {
  const legacy = await jsm.streams.info(LEGACY_INBOX_STREAM).catch((err: unknown) => {
    if (isStreamNotFound(err)) return undefined;
    throw err;
  });
  if (!legacy) return 0;
  let participants = 0;
  let moved = 0;
  for await (const c of jsm.consumers.list(LEGACY_INBOX_STREAM)) {
    if (!isParticipantId(c.name)) continue;
    participants++;
    if (await ensureInboxConsumer(jsm, c.name, options)) moved++;
  }
  if (moved > 0) {
    log.warn(
      { moved, participants, stream: LEGACY_INBOX_STREAM },
      `inbox consumers made in the inbox shards for participants registered before them; ${LEGACY_INBOX_STREAM} is no longer read: remove it once they are back (nats stream rm ${LEGACY_INBOX_STREAM})`,
    );
  }
  return moved;
}

/** Creates one stream, or brings an existing one to the configured settings. */
async function ensureStream(
  jsm: JetStreamManager,
  def: StreamDefinition,
  log: Logger,
): Promise<BackboneReport['streams'][number]> {
  const want = toStreamConfig(def);
  let info = await jsm.streams.info(def.name).catch((err: unknown) => {
    if (isStreamNotFound(err)) return undefined;
    throw err;
  });
  if (!info) {
    try {
      await jsm.streams.add(want);
      return { name: def.name, action: 'created' };
    } catch (err) {
      // Another replica created it first.
      if (!isStreamExists(err)) throw err;
      info = await jsm.streams.info(def.name);
    }
  }
  const current = info.config;
  const changed = SETTABLE.filter(
    (k) => JSON.stringify(current[k] ?? null) !== JSON.stringify(want[k] ?? null),
  );
  if (changed.length === 0) return { name: def.name, action: 'unchanged' };
  try {
    await jsm.streams.update(def.name, { ...current, ...want });
    log.info({ stream: def.name, changed }, 'stream settings updated');
    return { name: def.name, action: 'updated' };
  } catch (err) {
    log.warn(
      { stream: def.name, changed, err: (err as Error).message },
      'stream settings could not be updated',
    );
    return { name: def.name, action: 'unchanged' };
  }
}

/** The JetStream configuration of a participant's inbox consumer (push, flow control, heartbeats). */
export function inboxConsumerConfig(participantId: string, options: BackboneOptions = {}) {
  const c = inboxConsumer(participantId, options);
  return {
    durable_name: c.durableName,
    filter_subject: c.filterSubject,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(c.ackWaitMs),
    max_deliver: c.maxDeliver,
    max_ack_pending: c.maxAckPending,
    num_replicas: c.replicas,
    deliver_subject: c.deliverSubject,
    idle_heartbeat: nanos(c.idleHeartbeatMs),
    flow_control: c.flowControl,
  };
}

/**
 * Creates the durable consumer that is a participant's inbox, or keeps the one there (one made by
 * an earlier version as a pull consumer is turned into a push one when the participant attaches,
 * see the rooms service's `attachInbox`). Only services do this: participants are never allowed to
 * create consumers. True when it made the consumer.
 */
export async function ensureInboxConsumer(
  jsm: JetStreamManager,
  participantId: string,
  options: BackboneOptions = {},
): Promise<boolean> {
  const c = inboxConsumer(participantId, options);
  const existing = await jsm.consumers.info(c.stream, c.durableName).catch((err: unknown) => {
    if (isConsumerNotFound(err)) return undefined;
    throw err;
  });
  if (existing) return false;
  await jsm.consumers.add(c.stream, inboxConsumerConfig(participantId, options)).catch(async (err: Error) => {
    // Created at the same moment by another replica: fine if it is there now.
    if (!(await jsm.consumers.info(c.stream, c.durableName).catch(() => undefined))) throw err;
  });
  return true;
}

/** Deletes a participant's inbox consumer (deregistration). Absent is fine. */
export async function deleteInboxConsumer(jsm: JetStreamManager, participantId: string): Promise<boolean> {
  const c = inboxConsumer(participantId);
  try {
    return await jsm.consumers.delete(c.stream, c.durableName);
  } catch (err) {
    if (isConsumerNotFound(err)) return false;
    throw err;
  }
}
