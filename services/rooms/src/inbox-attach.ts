/**
 * `rooms.attachInbox`: a connection makes itself the one receiving a participant's deliveries.
 *
 * Inboxes are durable push consumers (no delivery waits for a pull request to reach the server:
 * nats-server 2.9.10 can drop an expired pull without the 408 that tells the client, which stalled
 * inboxes for seconds). A push consumer delivers to one subject; the connection subscribes to
 * `_INBOX.<caller>.deliver.<session>` first and then asks for the consumer to be pointed there. The
 * server itself refuses to move a deliver subject someone still listens to, so while one process of
 * a participant receives, a second one is refused (CONFLICT) instead of both handling the same
 * messages. A process that exits or dies loses its subscription, and the next one can attach.
 */
import { type ConsumerInfo, DeliverPolicy, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/transport-node';
import { inboxStream, ParleyError, subjects } from '@parley/contracts';
import { inboxConsumerConfig, isConsumerInUse, isConsumerNotFound, type Logger } from '@parley/kit';

/** What attaching did. */
export interface AttachResult {
  deliverSubject: string;
  /** A pull consumer made by an earlier version was replaced by a push one at its ack floor. */
  migrated: boolean;
}

/** Attaches `caller`'s inbox consumer to `_INBOX.<caller>.deliver.<session>`. */
export async function attachInbox(
  jsm: JetStreamManager,
  log: Logger,
  caller: string,
  session: string,
): Promise<AttachResult> {
  const target = subjects.inboxDeliver(caller, session);
  // The common case first: a push consumer pointed at a new session. `consumers.update` reads the
  // consumer and writes it (two JetStream API calls); reading it first as well made attaching three,
  // and thousands of agents connecting at once queue on the server's API (pnpm bench:scale).
  try {
    await jsm.consumers.update(inboxStream(caller), caller, { deliver_subject: target });
    return { deliverSubject: target, migrated: false };
  } catch (err) {
    if (isConsumerNotFound(err))
      throw new ParleyError('NOT_FOUND', `${caller} has no inbox (not registered, or deregistered)`);
    if (isConsumerInUse(err)) {
      throw new ParleyError(
        'CONFLICT',
        `another connection of ${caller} is receiving its deliveries: one process per participant at a time (stop the other one, or wait until the server notices it is gone)`,
        { details: { participant: caller, reason: 'inbox_in_use' } },
      );
    }
    // A pull consumer cannot become a push one by an update: see below.
    const info = await jsm.consumers.info(inboxStream(caller), caller).catch(() => undefined);
    if (info && !info.config.deliver_subject) {
      return { deliverSubject: target, migrated: await migrate(jsm, log, caller, target, info) };
    }
    // Anything else is the server not answering in time or busy (a JetStream API timeout, a
    // cluster electing a leader, thousands of agents attaching at once on a 3-node cluster):
    // retryable, and the SDK tries again — not an INTERNAL error the agent gives up on.
    log.warn({ err, participant: caller }, 'inbox attach failed; the client will try again');
    throw new ParleyError(
      'UNAVAILABLE',
      `the inbox of ${caller} could not be attached now (${(err as Error).message}); try again`,
      { cause: err, retryAfterMs: 1_000 },
    );
  }
}

/**
 * A pull consumer from an earlier version. A consumer cannot change from pull to push, so it is
 * recreated, starting at its ack floor: what was delivered and not acknowledged comes again (the
 * SDK recognises what it handled), nothing acknowledged before the floor does.
 */
async function migrate(
  jsm: JetStreamManager,
  log: Logger,
  caller: string,
  target: string,
  info: ConsumerInfo,
): Promise<true> {
  const config = inboxConsumerConfig(caller, {
    inboxAckWaitMs: Math.round((info.config.ack_wait ?? nanos(30_000)) / 1e6),
    inboxConsumerReplicas: info.config.num_replicas || 1,
  });
  const start = info.ack_floor.stream_seq + 1;
  await jsm.consumers.delete(inboxStream(caller), caller);
  await jsm.consumers.add(inboxStream(caller), {
    ...config,
    ...(info.config.max_deliver ? { max_deliver: info.config.max_deliver } : {}),
    ...(info.config.max_ack_pending ? { max_ack_pending: info.config.max_ack_pending } : {}),
    deliver_subject: target,
    ...(start > 1 ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: start } : {}),
  });
  log.info({ participant: caller, start }, 'pull inbox consumer migrated to push delivery');
  return true;
}
