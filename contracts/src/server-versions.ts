/**
 * Known nats-server defects that matter to Parley, by version, and what Parley does about each.
 * Shown by `npm start`'s banner and `parley doctor`; the reasons are in docs/architecture.md ("The
 * message path") and docs/operations.md.
 */

/** A server defect that applies to a version. */
export interface ServerDefect {
  id: string;
  /** What goes wrong. */
  summary: string;
  /** Fixed in (first good version). */
  fixedIn: string;
  /** `mitigated`: Parley does not depend on the broken behaviour; `upgrade`: only upgrading helps. */
  status: 'mitigated' | 'upgrade';
  /** What Parley does, or what the operator should do. */
  action: string;
}

/** The oldest nats-server Parley supports. */
export const MIN_SERVER_VERSION = '2.9.0';

/** `[major, minor, patch]` of a version string like `2.9.10` or `v2.12.1-beta`; undefined if unreadable. */
export function parseServerVersion(v: string): [number, number, number] | undefined {
  const m = /^v?(\d+)\.(\d+)\.(\d+)/.exec(v.trim());
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : undefined;
}

/** Compares two versions: negative when a < b. */
export function compareServerVersions(a: string, b: string): number {
  const x = parseServerVersion(a) ?? [0, 0, 0];
  const y = parseServerVersion(b) ?? [0, 0, 0];
  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return (x[i] ?? 0) - (y[i] ?? 0);
  return 0;
}

const within = (v: string, from: string, below: string) =>
  compareServerVersions(v, from) >= 0 && compareServerVersions(v, below) < 0;

/**
 * Whether nats-server `version` can lose a consumer's state on kill -9 (`consumer-state-reset`), so
 * that Parley records its consumers' floors. True for a version it cannot read.
 */
export function losesConsumerState(version: string | undefined): boolean {
  return (
    !version ||
    !parseServerVersion(version) ||
    serverDefects(version).some((d) => d.id === 'consumer-state-reset')
  );
}

/** The known defects of nats-server `version` that Parley cares about. */
export function serverDefects(version: string): ServerDefect[] {
  const out: ServerDefect[] = [];
  if (within(version, '2.9.0', '2.9.16')) {
    out.push({
      id: 'lost-pull-timeout',
      summary:
        'an expired pull request is dropped without a 408 when a message arrives for it (nats-server PR #3942), so a pull consumer can sit with no request at the server for seconds',
      fixedIn: '2.9.16',
      status: 'mitigated',
      action:
        'inboxes and fan-out partitions are durable push consumers (flow control, idle heartbeats): no delivery waits for a pull request',
    });
  }
  if (within(version, '2.9.0', '2.10.28') || within(version, '2.11.0', '2.11.2')) {
    out.push({
      id: 'inactive-push-consumer',
      summary:
        'a push consumer whose delivery fails as a connection closes is marked as having no subscriber while one is there, and delivers nothing until the interest changes (nats-server PR #6807)',
      fixedIn: '2.10.28 and 2.11.2',
      status: 'mitigated',
      action:
        'the SDK asks its inbox consumer after a reconnect and after missed heartbeats and subscribes again when the server reports nobody bound; the fan-out does the same for its partitions',
    });
  }
  if (within(version, '2.9.0', '2.11.11') || within(version, '2.12.0', '2.12.1')) {
    out.push({
      id: 'consumer-state-reset',
      summary:
        'a consumer’s state file is rewritten in place (truncate, then write), so a kill -9 between the two brings the consumer back at its start, pushing its whole stream again (7 of 1,800 state files empty after 60 kill -9s under load, 2.9.10)',
      fixedIn: '2.11.11 and 2.12.1',
      status: 'upgrade',
      action:
        'upgrade to 2.11.11+ or 2.12.1+ (the chart and compose pin 2.12.3). Until then the fan-out goes on after the last entry it acknowledged, an agent’s inbox after the higher of the last acknowledgement floor the server told it (read every 250 deliveries) and the floor the rooms service recorded (every 10 s, PARLEY_INBOX_FLOORS_MS), and the dead-letter and consent workers after the floors they recorded (every 10 s): what was acknowledged after the last record comes again',
    });
  }
  if (within(version, '2.10.20', '2.10.23')) {
    out.push({
      id: 'kill9-stream-loss',
      summary: 'a kill -9 can lose a whole stream (Jepsen, NATS 2.12.1 report)',
      fixedIn: '2.10.23',
      status: 'upgrade',
      action: 'upgrade to 2.10.23 or later (the chart and compose pin 2.12.3)',
    });
  }
  if (within(version, '2.12.0', '2.12.3')) {
    out.push({
      id: 'jepsen-2.12.1',
      summary:
        'acknowledged writes lost after file corruption on a minority of nodes, and with the default 2-minute fsync on a coordinated power loss (Jepsen, Dec 2025)',
      fixedIn: '2.12.3',
      status: 'upgrade',
      action:
        'upgrade to 2.12.3 or later, and set jetstream sync_interval: always where acknowledged writes must survive power loss',
    });
  }
  return out;
}

/** One line for a banner: the version and its defects, handled or to upgrade (`parley doctor` says more). */
export function describeServer(version: string): string {
  const defects = serverDefects(version);
  if (compareServerVersions(version, MIN_SERVER_VERSION) < 0) {
    return `nats-server ${version}: older than ${MIN_SERVER_VERSION}, not supported`;
  }
  if (defects.length === 0) return `nats-server ${version}: no known defect that affects Parley`;
  return `nats-server ${version}: ${defects
    .map((d) => `${d.id} (${d.status === 'mitigated' ? 'handled' : `fixed in ${d.fixedIn}: upgrade`})`)
    .join(', ')} — parley doctor says what each is and what Parley does`;
}
