import { INBOX_SHARDS, inboxShardOf, ROOT, subjects } from './subjects.js';

/** Stream names. The inboxes are {@link INBOX_SHARDS} streams: see {@link inboxStream}. */
export const streams = {
  rooms: 'PARLEY_ROOMS',
  events: 'PARLEY_EVENTS',
  audit: 'PARLEY_AUDIT',
  dlq: 'PARLEY_DLQ',
  advisories: 'PARLEY_ADVISORIES',
} as const;

/** The inbox stream of one shard: `PARLEY_INBOX_<shard>`. */
export const inboxShardStream = (shard: number) => `PARLEY_INBOX_${shard}`;

/** The inbox stream holding a participant's inbox (its shard's, {@link inboxShardOf}). */
export const inboxStream = (participantId: string) => inboxShardStream(inboxShardOf(participantId));

/** Every inbox stream, shard 0 first. */
export const inboxStreams = (): string[] =>
  Array.from({ length: INBOX_SHARDS }, (_, k) => inboxShardStream(k));

const INBOX_STREAM_NAMES = new Set(inboxStreams());

/** Whether a stream name is one of the inbox streams. */
export const isInboxStream = (name: string): boolean => INBOX_STREAM_NAMES.has(name);

/**
 * The JetStream advisories that make a dead letter: a delivery went past its consumer's max
 * deliveries (the recipient kept crashing or timing out), or the recipient's SDK terminated it
 * after its last allowed attempt failed. Kept in PARLEY_ADVISORIES, so a dead letter is recorded
 * even when no rooms replica was up at that moment.
 */
export const deadLetterAdvisories = (): string[] =>
  inboxStreams().flatMap((stream) => [
    `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.${stream}.*`,
    `$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.${stream}.*`,
  ]);

/** KV bucket names. */
export const buckets = {
  agents: 'parley_agents',
  presence: 'parley_presence',
  contacts: 'parley_contacts',
  rooms: 'parley_rooms',
  policy: 'parley_policy',
  usage: 'parley_usage',
  bindings: 'parley_bindings',
  leases: 'parley_leases',
  tasks: 'parley_tasks',
  gateway: 'parley_gateway',
  floors: 'parley_floors',
} as const;

/** Object store bucket for large artifacts referenced from file parts. */
export const objectStores = { artifacts: 'parley_artifacts' } as const;

/** Sizing and durability settings of the backbone; every value has a default. */
export interface BackboneOptions {
  /** Replicas of streams and KV buckets (1 on a single server, 3 on a cluster). @default 1 */
  replicas?: number;
  /** Replicas of each participant's inbox consumer (R1 by default even on R3 streams). @default 1 */
  inboxConsumerReplicas?: number;
  /** Fan-out partitions of the room log. Fixed for the life of a deployment. @default 16 */
  partitions?: number;
  /** How long room history is kept (0 = no age limit). @default 90 days */
  roomsMaxAgeMs?: number;
  /** Most bytes the room log (every room together) keeps; the oldest entries go first (0 = no limit). @default 0 */
  roomsMaxBytes?: number;
  /** Most entries kept per room; a room's oldest entries go first (0 = no limit). @default 0 */
  roomsMaxMsgsPerRoom?: number;
  /** How long an inbox entry is kept (0 = no age limit). @default 14 days */
  inboxMaxAgeMs?: number;
  /**
   * Most bytes the inboxes (every participant together) keep; the oldest go first (0 = no limit).
   * Each of the {@link INBOX_SHARDS} inbox streams keeps its share. @default 0
   */
  inboxMaxBytes?: number;
  /** Most entries kept per (participant, room) inbox subject; the oldest go first. @default 10000 */
  inboxMaxMsgsPerSubject?: number;
  /**
   * How long a delivery may stay unacknowledged before it is redelivered (the SDK extends it while a
   * handler runs). Also how long a restarted agent waits for the deliveries its crashed predecessor
   * held. @default 30 s
   */
  inboxAckWaitMs?: number;
  /** How long control-plane events are kept. @default 30 days */
  eventsMaxAgeMs?: number;
  /** How long dead letters are kept. @default 30 days */
  dlqMaxAgeMs?: number;
  /** TTL of presence entries: an agent that stops heartbeating turns offline after it. @default 30 s */
  presenceTtlMs?: number;
  /** TTL of fan-out leases: how long a dead owner holds a partition. @default 6 s */
  leaseTtlMs?: number;
  /** JetStream de-duplication window (client retries and fan-out re-runs). @default 2 minutes */
  duplicateWindowMs?: number;
}

const DAY = 24 * 60 * 60 * 1000;

/** The options with every default filled in. */
export function backboneDefaults(o: BackboneOptions = {}): Required<BackboneOptions> {
  return {
    replicas: o.replicas ?? 1,
    inboxConsumerReplicas: o.inboxConsumerReplicas ?? 1,
    partitions: o.partitions ?? 16,
    roomsMaxAgeMs: o.roomsMaxAgeMs ?? 90 * DAY,
    roomsMaxBytes: o.roomsMaxBytes ?? 0,
    roomsMaxMsgsPerRoom: o.roomsMaxMsgsPerRoom ?? 0,
    inboxMaxAgeMs: o.inboxMaxAgeMs ?? 14 * DAY,
    inboxMaxBytes: o.inboxMaxBytes ?? 0,
    inboxMaxMsgsPerSubject: o.inboxMaxMsgsPerSubject ?? 10_000,
    inboxAckWaitMs: o.inboxAckWaitMs ?? 30_000,
    eventsMaxAgeMs: o.eventsMaxAgeMs ?? 30 * DAY,
    dlqMaxAgeMs: o.dlqMaxAgeMs ?? 30 * DAY,
    presenceTtlMs: o.presenceTtlMs ?? 30_000,
    leaseTtlMs: o.leaseTtlMs ?? 6_000,
    duplicateWindowMs: o.duplicateWindowMs ?? 120_000,
  };
}

/** A stream, in JetStream's own vocabulary (durations in milliseconds). */
export interface StreamDefinition {
  name: string;
  description: string;
  subjects: string[];
  retention: 'limits' | 'interest' | 'workqueue';
  storage: 'file' | 'memory';
  replicas: number;
  maxAgeMs: number;
  maxMsgsPerSubject?: number;
  /** Most bytes kept (absent or 0: no limit). */
  maxBytes?: number;
  duplicateWindowMs: number;
  denyDelete: boolean;
  denyPurge: boolean;
  allowDirect: boolean;
  discard: 'old' | 'new';
}

/** A KV bucket. */
export interface KvDefinition {
  bucket: string;
  description: string;
  history: number;
  /** Entries expire this long after their last write; 0 = never. */
  ttlMs: number;
  replicas: number;
  maxValueSize: number;
}

/** Every stream Parley uses. */
export function streamDefinitions(options: BackboneOptions = {}): StreamDefinition[] {
  const o = backboneDefaults(options);
  const base = {
    storage: 'file' as const,
    replicas: o.replicas,
    duplicateWindowMs: o.duplicateWindowMs,
    denyDelete: false,
    denyPurge: false,
    allowDirect: true,
    discard: 'old' as const,
    retention: 'limits' as const,
  };
  return [
    {
      ...base,
      name: streams.rooms,
      description: 'Room logs: the source of truth and the history of every room.',
      subjects: ['parley.room.*.*'],
      maxAgeMs: o.roomsMaxAgeMs,
      ...(o.roomsMaxMsgsPerRoom ? { maxMsgsPerSubject: o.roomsMaxMsgsPerRoom } : {}),
      ...(o.roomsMaxBytes ? { maxBytes: o.roomsMaxBytes } : {}),
    },
    ...inboxStreams().map((name, shard) => ({
      ...base,
      name,
      description: `Per-participant delivery queues of inbox shard ${shard} of ${INBOX_SHARDS}, one subject per (participant, room), each read by the participant’s durable consumer.`,
      subjects: [subjects.inboxShard(shard)],
      maxAgeMs: o.inboxMaxAgeMs,
      maxMsgsPerSubject: o.inboxMaxMsgsPerSubject,
      ...(o.inboxMaxBytes ? { maxBytes: Math.ceil(o.inboxMaxBytes / INBOX_SHARDS) } : {}),
    })),
    {
      ...base,
      name: streams.events,
      description: 'Control-plane events: registry, membership, consent, policy, presence.',
      subjects: ['parley.evt.>'],
      maxAgeMs: o.eventsMaxAgeMs,
    },
    {
      ...base,
      name: streams.audit,
      description: 'Audit records; deletion and purge are denied.',
      subjects: ['parley.audit.>'],
      maxAgeMs: 0,
      denyDelete: true,
      denyPurge: true,
    },
    {
      ...base,
      name: streams.advisories,
      description: 'JetStream advisories Parley acts on: inbox deliveries past max deliveries (→ DLQ).',
      subjects: deadLetterAdvisories(),
      maxAgeMs: o.dlqMaxAgeMs,
    },
    {
      ...base,
      name: streams.dlq,
      description: 'Dead letters: deliveries a participant failed to handle past max deliveries.',
      subjects: ['parley.dlq.*'],
      maxAgeMs: o.dlqMaxAgeMs,
    },
  ];
}

/** Every KV bucket Parley uses. */
export function kvDefinitions(options: BackboneOptions = {}): KvDefinition[] {
  const o = backboneDefaults(options);
  const kv = (bucket: string, description: string, extra: Partial<KvDefinition> = {}) => ({
    bucket,
    description,
    history: 1,
    ttlMs: 0,
    replicas: o.replicas,
    maxValueSize: 256 * 1024,
    ...extra,
  });
  return [
    kv(buckets.agents, 'Orgs, humans and agents with their cards.', { history: 5 }),
    kv(buckets.presence, 'Presence and work status; entries expire when heartbeats stop.', {
      ttlMs: o.presenceTtlMs,
    }),
    kv(buckets.contacts, 'Contact requests, contacts and blocks.', { history: 5 }),
    kv(buckets.rooms, 'Rooms and their membership (a view of the room logs).', { history: 5 }),
    kv(buckets.policy, 'Suspensions, revocations, org policy, budgets; watched by every ingress.'),
    kv(buckets.usage, 'Usage aggregates per agent, owner, org, room and day.'),
    kv(buckets.bindings, 'Runtime bindings: an MCP session or a LangGraph thread to an agent.'),
    kv(buckets.leases, 'Fan-out partition leases and their holders; entries expire.', {
      ttlMs: o.leaseTtlMs,
    }),
    kv(buckets.tasks, 'Tasks and their states.', { history: 5 }),
    kv(buckets.gateway, 'Gateway: API keys (hashed), sessions, webhooks in and out, stream cursors.'),
    // One value per inbox shard (about 40 bytes per participant): 1 MB holds ~25,000 participants a
    // shard, ~400,000 in all.
    kv(
      buckets.floors,
      'Acknowledgement floors of the durable consumers, where a nats-server crash does not empty them: every inbox consumer (inbox.<shard>, recorded by the rooms service) and each background worker (worker.<consumer>). A consumer whose state nats-server lost goes on after its floor.',
      { maxValueSize: 1024 * 1024 },
    ),
  ];
}

/** The durable consumer that is a participant's inbox. */
export interface InboxConsumerDefinition {
  stream: string;
  durableName: string;
  filterSubject: string;
  replicas: number;
  ackWaitMs: number;
  maxDeliver: number;
  maxAckPending: number;
  /** Push delivery: the placeholder subject a new consumer delivers to (see `subjects.inboxDeliver`). */
  deliverSubject: string;
  /** The server heartbeats an idle push consumer this often (so a client notices a dead one). */
  idleHeartbeatMs: number;
  /** Flow control: the server waits for the client to keep up instead of overrunning it. */
  flowControl: boolean;
}

/**
 * Idle heartbeat of an inbox consumer, ms. Every connected agent's consumer sends one while nothing
 * else comes: 300 idle agents at 5 s cost nats-server ~0.9% of a core. The SDK checks its consumer
 * when its connection comes back, so the heartbeat only has to find what nothing else tells (a
 * consumer that went silent while the connection stayed up). @default 30000
 */
export const INBOX_IDLE_HEARTBEAT_MS = 30_000;

/**
 * Idle heartbeat of a fan-out partition consumer, ms. Two missed ones make the worker check its
 * consumer (see the fan-out's `recheck`); each one also names the last delivery the server made,
 * which tells the worker of deliveries lost in transit. The faults that lose deliveries or silence a
 * consumer are told sooner: a reconnect, and a leader election of the consumer (its advisory), each
 * make the worker check its consumer at once; the heartbeat is left for a consumer that goes silent
 * with neither. Only an idle consumer sends it: 1 s cost the idle backbone 0.6% of a core (16
 * partitions; services 1.5–1.6% → 1.15–1.2%, nats-server 0.66–0.76% → 0.41% at 5 s, 60 s windows).
 */
export const PARTITION_IDLE_HEARTBEAT_MS = 5_000;

/**
 * How long one NATS connect attempt (TCP, INFO, CONNECT, first PONG) of a Parley client may take
 * before the client tries the next server, ms. The client's default is 20 s: after a 3-node
 * cluster was killed and restarted, connections whose attempt reached a node that never answered
 * it reconnected exactly 20 s later (the ingress among them: nothing accepted meanwhile), while
 * the others were back within a second. A handshake takes milliseconds; a loaded machine, seconds.
 */
export const NATS_CONNECT_TIMEOUT_MS = 5_000;

/** Deliveries a participant may fail before the message goes to the DLQ. @default 5 */
export const INBOX_MAX_DELIVER = 5;

/** The inbox consumer of one participant. */
export function inboxConsumer(participantId: string, options: BackboneOptions = {}): InboxConsumerDefinition {
  const o = backboneDefaults(options);
  return {
    stream: inboxStream(participantId),
    durableName: participantId,
    filterSubject: subjects.inboxAll(participantId),
    replicas: o.inboxConsumerReplicas,
    ackWaitMs: o.inboxAckWaitMs,
    maxDeliver: INBOX_MAX_DELIVER,
    maxAckPending: 1_000,
    deliverSubject: subjects.inboxDeliver(participantId),
    idleHeartbeatMs: INBOX_IDLE_HEARTBEAT_MS,
    flowControl: true,
  };
}

/** The NATS permissions of a participant's user: what DESIGN's "Names on NATS" specifies. */
export function participantPermissions(participantId: string): {
  pub: { allow: string[] };
  sub: { allow: string[] };
} {
  return {
    pub: {
      allow: [
        subjects.participantPrefix(participantId),
        `$JS.API.CONSUMER.INFO.${inboxStream(participantId)}.${participantId}`,
        `$JS.API.CONSUMER.MSG.NEXT.${inboxStream(participantId)}.${participantId}`,
        `$JS.ACK.${inboxStream(participantId)}.${participantId}.>`,
        // Push delivery with flow control: the client answers the server's flow-control requests.
        `$JS.FC.${inboxStream(participantId)}.${participantId}.>`,
      ],
    },
    sub: { allow: [`${subjects.replyPrefix(participantId)}.>`] },
  };
}

/**
 * The same permissions as a signing-key template: `{{name()}}` is the user's name, which Parley sets
 * to the participant id. On nats-server 2.9 a template must fill a whole subject token, and it cannot
 * hash, so the stream token is `*` instead of the participant's inbox shard: what it reaches is a
 * consumer named exactly after the participant, and only the inbox streams have such consumers (one
 * each, in the participant's own shard). The user still cannot create, delete or read any other
 * consumer, nor read a stream.
 */
export function participantPermissionTemplate(): {
  pub: { allow: string[] };
  sub: { allow: string[] };
} {
  const id = '{{name()}}';
  return {
    pub: {
      allow: [
        `parley.in.${id}.>`,
        `$JS.API.CONSUMER.INFO.*.${id}`,
        `$JS.API.CONSUMER.MSG.NEXT.*.${id}`,
        `$JS.ACK.*.${id}.>`,
        `$JS.FC.*.${id}.>`,
      ],
    },
    sub: { allow: [`_INBOX.${id}.>`] },
  };
}

/**
 * The NATS permissions of a service's **responder** user (`svc_<name>`, its second connection): it
 * receives requests (`parley.in.>`, the services protocol's `$SRV.>`) and may publish replies only,
 * to `_INBOX.>`. It cannot write to a stream, a KV bucket, an event, another participant's request
 * subject or a room: a reply subject that names one of those is refused by the NATS server even if
 * the service's own check (kit `respondTo`, which allows only the caller's `_INBOX.<caller>.`) were
 * missed. What a handler writes goes over the service's other connection.
 */
export function responderPermissions(serviceName: string): {
  pub: { allow: string[] };
  sub: { allow: string[] };
} {
  return {
    pub: { allow: ['_INBOX.>'] },
    sub: { allow: [`${ROOT}.in.>`, '$SRV.>', `${subjects.replyPrefix(serviceName)}.>`] },
  };
}
