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
import {
  type ConsumerCreateOptions,
  type ConsumerInfo,
  DeliverPolicy,
  type JetStreamManager,
} from '@nats-io/jetstream';
import { nanos } from '@nats-io/transport-node';
import { inboxStream, ParleyError, subjects } from '@parley/contracts';
import { inboxConsumerConfig, isConsumerInUse, isConsumerNotFound, type Logger } from '@parley/kit';
import type { InboxFloors } from './inbox-floors.js';

/** What attaching did. */
export interface AttachResult {
  deliverSubject: string;
  /** A pull consumer made by an earlier version was replaced by a push one at its ack floor. */
  migrated: boolean;
  /** The consumer was made again after this inbox position (see {@link attachInbox}). */
  resumedAfter?: number;
}

/** What attaching needs. */
export interface AttachDeps {
  jsm: JetStreamManager;
  log: Logger;
  /** The floors recorded where a crash does not empty them (see inbox-floors.ts). */
  floors?: InboxFloors | undefined;
}

/**
 * Attaches `caller`'s inbox consumer to `_INBOX.<caller>.deliver.<session>`. A consumer found below
 * its floor — the one recorded for it, or with `resumeAfter` the one the caller's SDK was told last,
 * whichever is higher — forgot its position: nats-server before 2.11.11 (and 2.12.0) rewrites a
 * consumer's state file in place, and a kill -9 between the truncate and the write brings the
 * consumer back at its start, which would push the participant's whole inbox again (up to 14 days).
 * It is made again after that floor before it is pointed at the caller. Everything up to a floor
 * the server reported was acknowledged, so nothing the participant has not handled is skipped.
 */
export async function attachInbox(
  deps: AttachDeps,
  caller: string,
  session: string,
  resumeAfter?: number,
): Promise<AttachResult> {
  const { jsm, log } = deps;
  const target = subjects.inboxDeliver(caller, session);
  // Two JetStream API calls, as `consumers.update` makes (it reads the consumer, then writes it),
  // with the check between them: thousands of agents connecting at once queue on the server's API
  // (pnpm bench:scale), so the common case makes no third.
  const stream = inboxStream(caller);
  try {
    const info = await jsm.consumers.info(stream, caller);
    // A pull consumer cannot become a push one by an update: see below.
    if (!info.config.deliver_subject)
      return { deliverSubject: target, migrated: await migrate(jsm, log, caller, target, info) };
    const asked = resumeAfter ?? 0;
    // A resume comes right after a crash, when the watched copy of the record may be behind.
    const recorded =
      (resumeAfter === undefined ? deps.floors?.floorOf(caller) : await deps.floors?.read(caller)) ?? 0;
    if (info.ack_floor.stream_seq < Math.max(asked, recorded)) {
      const last = (await jsm.streams.info(stream)).state.last_seq;
      if (asked > last)
        throw new ParleyError(
          'INVALID_ARGUMENT',
          `resumeAfter ${asked} is past the end of ${caller}'s inbox stream (${last}): nothing was changed`,
          { details: { resumeAfter: asked, inboxEnd: last } },
        );
      // A recorded floor past the end is from before the stream was made again (inbox-floors.ts).
      if (recorded > last)
        log.warn(
          { participant: caller, floor: recorded, last },
          'recorded inbox floor past the inbox end: ignored',
        );
      const after = recorded > asked && recorded <= last ? recorded : asked;
      if (info.ack_floor.stream_seq < after) {
        // Someone else receiving is not this caller's to move; its own session (a resume) is.
        if (info.push_bound && info.config.deliver_subject !== target) throw inUse(caller);
        await recreateAt(jsm, caller, target, info, after + 1);
        log.warn(
          {
            participant: caller,
            ackFloor: info.ack_floor.stream_seq,
            delivered: info.delivered.stream_seq,
            after,
          },
          `inbox consumer below the floor ${after === asked ? 'the SDK' : 'the record'} had (nats-server lost its state): made again after it`,
        );
        return { deliverSubject: target, migrated: false, resumedAfter: after };
      }
    }
    await jsm.consumers.add(stream, { ...info.config, deliver_subject: target }, UPDATE);
    return { deliverSubject: target, migrated: false };
  } catch (err) {
    if (err instanceof ParleyError) throw err;
    if (isConsumerNotFound(err)) throw noInbox(caller);
    if (isConsumerInUse(err)) throw inUse(caller);
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
 * What makes `consumers.add` an update, as nats.js's own `consumers.update` sends it (after reading
 * the consumer, which is read here already); its options type leaves the action out.
 */
const UPDATE = { action: 'update' } as ConsumerCreateOptions;

const inUse = (caller: string) =>
  new ParleyError(
    'CONFLICT',
    `another connection of ${caller} is receiving its deliveries: one process per participant at a time (stop the other one, or wait until the server notices it is gone)`,
    { details: { participant: caller, reason: 'inbox_in_use' } },
  );

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
  const start = info.ack_floor.stream_seq + 1;
  await recreateAt(jsm, caller, target, info, start);
  log.info({ participant: caller, start }, 'pull inbox consumer migrated to push delivery');
  return true;
}

const noInbox = (caller: string) =>
  new ParleyError('NOT_FOUND', `${caller} has no inbox (not registered, or deregistered)`);

/**
 * Makes `caller`'s inbox consumer again, pointed at `target` and starting at inbox position `start`,
 * with the limits the one it replaces (`info`) had.
 */
async function recreateAt(
  jsm: JetStreamManager,
  caller: string,
  target: string,
  info: ConsumerInfo,
  start: number,
): Promise<void> {
  const config = inboxConsumerConfig(caller, {
    inboxAckWaitMs: Math.round((info.config.ack_wait ?? nanos(30_000)) / 1e6),
    inboxConsumerReplicas: info.config.num_replicas || 1,
  });
  await jsm.consumers.delete(inboxStream(caller), caller);
  await jsm.consumers.add(inboxStream(caller), {
    ...config,
    ...(info.config.max_deliver ? { max_deliver: info.config.max_deliver } : {}),
    ...(info.config.max_ack_pending ? { max_ack_pending: info.config.max_ack_pending } : {}),
    deliver_subject: target,
    ...(start > 1 ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: start } : {}),
  });
}
