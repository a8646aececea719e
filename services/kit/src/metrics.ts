/**
 * Every Prometheus metric Parley exports, defined once, with label values drawn from closed sets
 * (endpoints, error codes, outcomes, partitions) so no caller id, room id or message id can ever
 * become a label — except the deliberately bounded top-N of inbox backlogs.
 *
 * prom-client rather than the OpenTelemetry Prometheus exporter: it is the stable, widely used
 * Prometheus client for Node (the OTel exporter is 0.x and experimental), it renders the text
 * format straight into our Fastify route instead of opening a server of its own, its counters are a
 * few property writes on the hot path, and /metrics keeps working with OTEL_SDK_DISABLED.
 */
import { type ErrorCode, isErrorCode } from '@parley/contracts';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

/** Names of the metrics (all prefixed `parley_`), for dashboards, alerts and tests. */
export const metricNames = {
  apiRequests: 'parley_api_requests_total',
  apiDuration: 'parley_api_request_duration_seconds',
  messages: 'parley_messages_total',
  deliveryLatency: 'parley_message_delivery_seconds',
  fanoutLagMessages: 'parley_fanout_lag_messages',
  fanoutLagSeconds: 'parley_fanout_lag_seconds',
  fanoutUnheld: 'parley_fanout_unheld_partitions',
  fanoutStuck: 'parley_fanout_stuck_partitions',
  inboxBacklogTop: 'parley_inbox_backlog_messages',
  inboxBacklogParticipants: 'parley_inbox_backlog_participants',
  inboxBacklogTotal: 'parley_inbox_backlog_total_messages',
  policyDenials: 'parley_policy_denials_total',
  repliesRefused: 'parley_replies_refused_total',
  malformedRecords: 'parley_malformed_records_total',
} as const;

/**
 * Why a reply was not sent (closed set):
 * - `foreign_reply`: the request named a reply subject outside its caller's own `_INBOX.<caller>.`;
 * - `no_caller`: the request's subject names no caller (not `parley.in.<caller>.…`).
 */
export type RefusedReply = 'foreign_reply' | 'no_caller';

/**
 * What happened to a message at a service:
 * - `accepted`: the ingress wrote it to the room log;
 * - `refused`: the ingress refused it (the code says why: NOT_A_MEMBER, RATE_LIMITED, …);
 * - `duplicate`: a retried send the dedupe window recognised;
 * - `fanned_out`: the fan-out wrote one copy into a recipient's inbox (counted per recipient);
 * - `dead_lettered`: it went to PARLEY_DLQ (the code says why);
 * - `failed`: an unexpected error (INTERNAL).
 */
export type MessageOutcome = 'accepted' | 'refused' | 'duplicate' | 'fanned_out' | 'dead_lettered' | 'failed';

/** The `code` label of a success. */
export type OkOrCode = 'OK' | ErrorCode;

/** Upper bounds of the inbox backlog distribution (`le` label), in messages. */
export const INBOX_BACKLOG_BOUNDS = [0, 1, 10, 100, 1000, 10_000] as const;

/** Options of {@link createMetrics}. */
export interface CreateMetricsOptions {
  /** Add prom-client's process metrics (CPU, memory, event-loop lag, GC). @default true */
  processMetrics?: boolean;
  /** How many of the largest inbox backlogs are exported with a participant label. @default 10 */
  topBacklogs?: number;
}

/** The metrics of a process; one instance serves every service in it. */
export interface ParleyMetrics {
  /** The prom-client registry (for extra metrics a service defines next to these). */
  readonly registry: Registry;
  /** The Content-Type of {@link render}. */
  readonly contentType: string;
  /** The Prometheus text exposition of every metric. */
  render(): Promise<string>;
  /** One request/reply API call: `endpoint` is `<service>.<method>`; done by serveApis. */
  observeApi(endpoint: string, code: OkOrCode, seconds: number): void;
  /** Counts `count` messages with `outcome` (and the error code of a refusal or failure). */
  recordMessage(outcome: MessageOutcome, code?: OkOrCode, count?: number): void;
  /** Send→deliver latency: from the ingress accepting a message to its copy being durable in a recipient's inbox. */
  observeDelivery(seconds: number): void;
  /** How far the fan-out of `partition` is behind the room log. */
  setFanoutLag(partition: number, lag: { messages: number; seconds?: number }): void;
  /** Partitions with entries waiting and no live lease holder (should be 0; a replica takes them). */
  setFanoutUnheld(partitions: number): void;
  /** Partitions held by this replica whose worker has not delivered for a while (see the fan-out). */
  setFanoutStuck(partitions: number): void;
  /**
   * Replaces the inbox backlog picture with `backlogs` (participant id → unacknowledged messages,
   * e.g. from each inbox consumer's `num_pending + num_ack_pending`). Exported as: the top-N
   * participants by backlog (participant label, at most N series), how many participants are at or
   * under each bound of {@link INBOX_BACKLOG_BOUNDS} (like a histogram snapshot), and the total.
   */
  recordInboxBacklog(backlogs: Iterable<readonly [participant: string, messages: number]>): void;
  /** A policy decision that refused something; `reason` is the code the caller got. */
  recordDenial(reason: ErrorCode): void;
  /** A reply a service dropped instead of sending: see {@link RefusedReply}. */
  recordRefusedReply(reason: RefusedReply): void;
  /** A state record (e.g. a standing in `parley_policy`) that did not parse; `kind` is its key prefix. */
  recordMalformedRecord(kind: 'participant'): void;
}

// A label value from outside the closed set becomes INTERNAL instead of a new series.
const codeLabel = (code: string | undefined): OkOrCode =>
  code === undefined || code === 'OK' ? 'OK' : isErrorCode(code) ? code : 'INTERNAL';

/** How often the event-loop delay (`nodejs_eventloop_lag_*`) is sampled, ms. */
const EVENT_LOOP_SAMPLE_MS = 100;

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** Creates the metrics in a registry of their own. */
export function createMetrics(options: CreateMetricsOptions = {}): ParleyMetrics {
  const registry = new Registry();
  // The event-loop delay is sampled every 100 ms, not prom-client's default 10 ms: a timer firing 100
  // times a second cost 0.5–0.9% of a core in an otherwise idle process (0.1% at 100 ms).
  if (options.processMetrics ?? true)
    collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  const registers = [registry];
  const topN = options.topBacklogs ?? 10;

  const apiRequests = new Counter({
    name: metricNames.apiRequests,
    help: 'Request/reply API calls by endpoint (<service>.<method>) and result code (OK or the error code).',
    labelNames: ['endpoint', 'code'] as const,
    registers,
  });
  const apiDuration = new Histogram({
    name: metricNames.apiDuration,
    help: 'Time from receiving an API request to sending its reply, by endpoint and outcome (ok, error).',
    labelNames: ['endpoint', 'outcome'] as const,
    buckets: LATENCY_BUCKETS,
    registers,
  });
  const messages = new Counter({
    name: metricNames.messages,
    help: 'Messages by outcome (accepted, refused, duplicate, fanned_out, dead_lettered, failed) and code.',
    labelNames: ['outcome', 'code'] as const,
    registers,
  });
  const delivery = new Histogram({
    name: metricNames.deliveryLatency,
    help: 'Send→deliver latency: from the ingress accepting a message to its copy being durable in a recipient inbox.',
    buckets: LATENCY_BUCKETS,
    registers,
  });
  const lagMessages = new Gauge({
    name: metricNames.fanoutLagMessages,
    help: 'Room-log messages of a partition not yet fanned out.',
    labelNames: ['partition'] as const,
    registers,
  });
  const lagSeconds = new Gauge({
    name: metricNames.fanoutLagSeconds,
    help: 'Age of the oldest room-log message of a partition not yet fanned out.',
    labelNames: ['partition'] as const,
    registers,
  });
  const unheld = new Gauge({
    name: metricNames.fanoutUnheld,
    help: 'Fan-out partitions with room-log entries waiting and no live lease holder.',
    registers,
  });
  const stuck = new Gauge({
    name: metricNames.fanoutStuck,
    help: 'Fan-out partitions held by this replica whose worker has had no working subscription for PARLEY_FANOUT_STUCK_MS.',
    registers,
  });
  const backlogTop = new Gauge({
    name: metricNames.inboxBacklogTop,
    help: `Unacknowledged inbox messages of the ${topN} participants with the largest backlog (bounded: only those get a series).`,
    labelNames: ['participant'] as const,
    registers,
  });
  const backlogParticipants = new Gauge({
    name: metricNames.inboxBacklogParticipants,
    help: 'Participants whose inbox backlog is at most `le` messages (a histogram snapshot over all inboxes).',
    labelNames: ['le'] as const,
    registers,
  });
  const backlogTotal = new Gauge({
    name: metricNames.inboxBacklogTotal,
    help: 'Unacknowledged inbox messages over all participants.',
    registers,
  });
  const denials = new Counter({
    name: metricNames.policyDenials,
    help: 'Policy decisions that refused a request or message, by reason (the error code returned).',
    labelNames: ['reason'] as const,
    registers,
  });

  const repliesRefused = new Counter({
    name: metricNames.repliesRefused,
    help: 'Replies dropped because the request named a reply subject outside its caller’s own _INBOX.<caller>. prefix, by reason.',
    labelNames: ['reason'] as const,
    registers,
  });
  const malformed = new Counter({
    name: metricNames.malformedRecords,
    help: 'State records that did not parse (each reader treats them the same way: not active), by kind.',
    labelNames: ['kind'] as const,
    registers,
  });

  return {
    registry,
    contentType: registry.contentType,
    render: () => registry.metrics(),
    observeApi(endpoint, code, seconds) {
      const c = codeLabel(code);
      apiRequests.inc({ endpoint, code: c });
      apiDuration.observe({ endpoint, outcome: c === 'OK' ? 'ok' : 'error' }, seconds);
    },
    recordMessage(outcome, code, count = 1) {
      messages.inc({ outcome, code: codeLabel(code) }, count);
    },
    observeDelivery(seconds) {
      delivery.observe(seconds);
    },
    setFanoutLag(partition, lag) {
      if (!Number.isInteger(partition) || partition < 0 || partition >= 4096) return;
      lagMessages.set({ partition: String(partition) }, lag.messages);
      if (lag.seconds !== undefined) lagSeconds.set({ partition: String(partition) }, lag.seconds);
    },
    setFanoutUnheld(partitions) {
      unheld.set(partitions);
    },
    setFanoutStuck(partitions) {
      stuck.set(partitions);
    },
    recordInboxBacklog(backlogs) {
      const all = [...backlogs];
      backlogTop.reset();
      for (const [participant, n] of [...all].sort((a, b) => b[1] - a[1]).slice(0, topN)) {
        if (n > 0) backlogTop.set({ participant }, n);
      }
      let total = 0;
      const counts = INBOX_BACKLOG_BOUNDS.map(() => 0);
      for (const [, n] of all) {
        total += n;
        INBOX_BACKLOG_BOUNDS.forEach((bound, i) => {
          if (n <= bound) counts[i] = (counts[i] ?? 0) + 1;
        });
      }
      INBOX_BACKLOG_BOUNDS.forEach((bound, i) => {
        backlogParticipants.set({ le: String(bound) }, counts[i] ?? 0);
      });
      backlogParticipants.set({ le: '+Inf' }, all.length);
      backlogTotal.set(total);
    },
    recordDenial(reason) {
      denials.inc({ reason: codeLabel(reason) });
    },
    recordRefusedReply(reason) {
      repliesRefused.inc({ reason });
    },
    recordMalformedRecord(kind) {
      malformed.inc({ kind });
    },
  };
}
