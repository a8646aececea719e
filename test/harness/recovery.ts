/**
 * How long deliveries took to recover after a crash: for each delivery, the time from whichever came
 * later — the message being accepted, or the last kill/restart — to its handler. `pnpm
 * test:contended` collects the worst of each crash test (PARLEY_RECOVERY_REPORT) and checks it
 * against its bound; the tests themselves only report it (speed is never a pass/fail test here).
 */
import { appendFile } from 'node:fs/promises';
import { jetstreamManager } from '@nats-io/jetstream';
import {
  connect,
  credsAuthenticator,
  type NatsConnection,
  type NodeConnectionOptions,
} from '@nats-io/transport-node';
import { buckets, inboxStreams, streams } from '@parley/contracts';

/** One delivery: when its message was accepted and when a member's handler got it (ms since the epoch). */
export interface TimedDelivery {
  acceptedAt: number;
  handledAt: number;
}

/** The worst delay of `deliveries` after `lastRestartAt`, in ms (0 when none). */
export function worstDelayAfterRecovery(deliveries: Iterable<TimedDelivery>, lastRestartAt: number): number {
  let worst = 0;
  for (const d of deliveries) worst = Math.max(worst, d.handledAt - Math.max(d.acceptedAt, lastRestartAt));
  return worst;
}

/** Logs the figure and appends it as a JSON line to `$PARLEY_RECOVERY_REPORT` when set. */
export async function reportRecovery(
  test: string,
  worstMs: number,
  extra: Record<string, unknown> = {},
): Promise<void> {
  console.log(
    `recovery: ${test}: worst delivery ${worstMs} ms after the last kill/restart${Object.keys(extra).length ? ` ${JSON.stringify(extra)}` : ''}`,
  );
  const file = process.env.PARLEY_RECOVERY_REPORT;
  if (!file) return;
  const nodes = Number(process.env.PARLEY_TEST_NODES ?? 1);
  await appendFile(
    file,
    `${JSON.stringify({ test, nodes, worstMs, at: new Date().toISOString(), ...extra })}\n`,
  );
}

/** A connection with a Parley service's creds (full access), for inspecting streams in tests. */
export async function serviceConnection(
  parley: { natsUrl: string; serviceCreds(name?: string): Promise<string> },
  options: Partial<NodeConnectionOptions> = {},
): Promise<NatsConnection> {
  return connect({
    servers: parley.natsUrl.split(','),
    authenticator: credsAuthenticator(new TextEncoder().encode(await parley.serviceCreds())),
    ...options,
  });
}

/**
 * When JetStream answers again after a restart, in ms since the epoch, or undefined if it did not
 * within `timeoutMs`: the streams `names` (default: the room log and the inbox streams) each have a
 * leader that answers its info, and the JetStream API answers the account's info — which a cluster
 * answers only with a meta leader, without which no consumer can be made (after a node's restart,
 * `JetStream system temporarily unavailable` for seconds while a partition consumer was being made
 * again). How much of a recovery figure is nats-server's own (electing JetStream's leaders), and
 * how much is Parley's: a delivery cannot be faster than the streams it goes through. Undefined
 * too once `parley.signal` (a test Parley's) is aborted: the backbone is going away.
 */
export async function whenStreamsAnswer(
  parley: { natsUrl: string; serviceCreds(name?: string): Promise<string>; signal?: AbortSignal },
  names: string[] = [streams.rooms, ...inboxStreams()],
  timeoutMs = 120_000,
): Promise<number | undefined> {
  const nc = await serviceConnection(parley, { maxReconnectAttempts: -1, reconnectTimeWait: 100 });
  try {
    const jsm = await jetstreamManager(nc, { checkAPI: false, timeout: 1_000 });
    const answers = async (name: string) => {
      const info = await jsm.streams.info(name).catch(() => undefined);
      return info !== undefined && (!info.cluster || info.cluster.leader !== undefined);
    };
    const apiAnswers = () =>
      jsm.getAccountInfo().then(
        () => true,
        () => false,
      );
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline && !parley.signal?.aborted) {
      if ((await Promise.all([apiAnswers(), ...names.map(answers)])).every(Boolean)) return Date.now();
      await new Promise((r) => setTimeout(r, 50));
    }
    return undefined;
  } finally {
    await nc.close();
  }
}

/**
 * The stream of the fan-out's lease bucket: leases lapse while the backbone is down, and no
 * partition is fanned out before its lease is taken again (see {@link whenStreamsAnswer}).
 */
export const leaseStream = `KV_${buckets.leases}`;
