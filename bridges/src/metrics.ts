/**
 * A bridge's Prometheus metrics: the kit's {@link createMetrics} (the registry, process metrics and
 * exposition every Parley service has) with the bridge's own series registered on it. Labels come
 * from closed sets (the bridge name from the mapping, outcomes, reasons below, action names from
 * the mapping), so no source id or user id becomes a series.
 */
import { type CreateMetricsOptions, createMetrics, type ParleyMetrics } from '@parley/kit';
import { Counter, Gauge, Histogram } from 'prom-client';

/** Names of the bridge metrics. */
export const bridgeMetricNames = {
  events: 'parley_bridge_events_total',
  latency: 'parley_bridge_event_to_room_seconds',
  sourceUp: 'parley_bridge_source_up',
  actions: 'parley_bridge_actions_total',
  commit: 'parley_bridge_source_commit_seconds',
} as const;

/** What happened to a source event. */
export type EventOutcome = 'stored' | 'duplicate' | 'ignored' | 'refused' | 'dead_lettered';

/** Why an event was refused or dead-lettered (a closed set). */
export const refusalReasons = [
  'malformed',
  'unsigned',
  'bad_signature',
  'unauthenticated',
  'unmapped_identity',
  'too_large',
  'render_failed',
  'rejected_by_parley',
] as const;
export type RefusalReason = (typeof refusalReasons)[number];

/** The metrics of one bridge. */
export interface BridgeMetrics {
  event(outcome: EventOutcome, reason?: RefusalReason | 'none'): void;
  /** Source event time → stored in its room. */
  observeLatency(seconds: number): void;
  sourceUp(up: boolean): void;
  /** A position committed at the source (Salesforce managed subscriptions): sent → acknowledged. */
  observeCommit(seconds: number): void;
  action(action: string, outcome: 'ok' | 'error' | 'denied'): void;
  /** Counted events by outcome (for tests and the health line). */
  count(outcome: EventOutcome, reason?: RefusalReason): number;
  /** The process's metrics (the kit's), which `/metrics` renders: the bridge series are in its registry. */
  readonly parley: ParleyMetrics;
}

/** The kit's metrics for the bridge process, plus the series of bridge `bridge`. */
export function createBridgeMetrics(bridge: string, options: CreateMetricsOptions = {}): BridgeMetrics {
  const parley = createMetrics(options);
  const registers = [parley.registry];
  const events = new Counter({
    name: bridgeMetricNames.events,
    help: 'Source events by outcome (stored, duplicate, ignored, refused, dead_lettered) and reason.',
    labelNames: ['bridge', 'outcome', 'reason'] as const,
    registers,
  });
  const latency = new Histogram({
    name: bridgeMetricNames.latency,
    help: 'From the source event time (or its arrival) to the room log storing it.',
    labelNames: ['bridge'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers,
  });
  const up = new Gauge({
    name: bridgeMetricNames.sourceUp,
    help: '1 while the bridge reaches its source system, 0 during an outage.',
    labelNames: ['bridge'] as const,
    registers,
  });
  const actions = new Counter({
    name: bridgeMetricNames.actions,
    help: 'Outbound actions (tool calls on the source system) by action and outcome.',
    labelNames: ['bridge', 'action', 'outcome'] as const,
    registers,
  });
  const commit = new Histogram({
    name: bridgeMetricNames.commit,
    help: 'From committing a position at the source (a managed subscription’s replay id) to the source acknowledging it.',
    labelNames: ['bridge'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5],
    registers,
  });
  const counts = new Map<string, number>();
  return {
    parley,
    event(outcome, reason = 'none') {
      events.inc({ bridge, outcome, reason });
      for (const k of [outcome, `${outcome}:${reason}`]) counts.set(k, (counts.get(k) ?? 0) + 1);
    },
    observeLatency(seconds) {
      latency.observe({ bridge }, seconds);
    },
    sourceUp(isUp) {
      up.set({ bridge }, isUp ? 1 : 0);
    },
    observeCommit(seconds) {
      commit.observe({ bridge }, seconds);
    },
    action(action, outcome) {
      actions.inc({ bridge, action, outcome });
    },
    count(outcome, reason) {
      return counts.get(reason ? `${outcome}:${reason}` : outcome) ?? 0;
    },
  };
}
