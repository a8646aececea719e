/**
 * What follows a consent change, driven by its event: every change is first a compare-and-set of
 * the pair record, then an event on `parley.evt.consent.<kind>` (stream PARLEY_EVENTS). One durable
 * consumer, `consent_outbox`, shared by every replica and handling one event at a time in stream
 * order, turns each event into
 *
 * - notices: a `system` entry in each recipient's notice room (rooms `notify`), which reaches its
 *   inbox like any room message — in order, durably, with history — and which the SDK surfaces as
 *   `contact_request` / `contact_update`;
 * - for an ended contact: the rooms service applies each shared room's `onContactRevoked` policy.
 *
 * A failure (rooms down, a timeout) is retried with backoff until it succeeds; retries of a notice
 * carry the same idempotency key (`<eventId>:<recipient>`), so a notice is stored once.
 */
import { AckPolicy, type JetStreamClient, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { type NatsConnection, nanos } from '@nats-io/transport-node';
import {
  type ContactNotice,
  type ContactRequest,
  isParleyError,
  ParleyEvent,
  type Provenance,
  request,
  roomsApi,
  serviceId,
  streams,
  subjects,
  type Tracer,
} from '@parley/contracts';
import { durableWorker, type Logger } from '@parley/kit';

const SELF = serviceId('consent');
/** The durable consumer's name. */
export const OUTBOX_CONSUMER = 'consent_outbox';
/** Past this many attempts an event is given up (logged), so one poison event cannot stall the rest. */
const MAX_ATTEMPTS = 30;

/** The event data the outbox reads (written by the service). */
export interface OutboxData {
  request?: ContactRequest;
  notify?: string[];
  /** revoked / blocked: the two sides and who ended it. */
  a?: string;
  b?: string;
  by?: string;
  endedContact?: boolean;
}

const dec = new TextDecoder();

function noticeFor(
  kind: string,
  d: OutboxData,
  to: string,
): { text: string; notice: ContactNotice; provenance?: Provenance } | undefined {
  const r = d.request;
  if (kind === 'requested' && r) {
    const forAgent = to !== r.to ? ` (your agent ${r.to})` : '';
    return {
      text: `${r.from} asks for contact${forAgent}: “${r.reason}” — answer with: parley contact accept|reject|block ${r.id}`,
      notice: { event: 'contact_request', request: r, participant: r.to },
      provenance: { trust: 'external', source: r.from, note: 'the reason is the requester’s own words' },
    };
  }
  if ((kind === 'answered' || kind === 'expired') && r) {
    const change = r.state as 'accepted' | 'rejected' | 'blocked' | 'expired';
    const participant = to === r.to || to === r.from ? to : r.to;
    const text =
      change === 'expired'
        ? `Contact request ${r.id} from ${r.from} to ${r.to} expired unanswered.`
        : to === r.from
          ? `${r.to} ${change} your contact request ${r.id}${r.via === 'crossing' ? ' (you had both asked)' : ''}.`
          : `${r.from} is now a contact of ${r.to}${r.via === 'auto_accept' ? ' (accepted at once by its policy)' : ''}.`;
    return { text, notice: { event: 'contact_update', request: r, change, participant } };
  }
  if ((kind === 'revoked' || kind === 'blocked') && d.a && d.b) {
    const other = to === d.a ? d.b : d.a;
    return {
      text: `The contact between ${d.a} and ${d.b} ended (${kind} by ${d.by ?? d.a}); nothing already said is removed, new invites need a new request.`,
      notice: { event: 'contact_update', change: 'revoked', with: other, participant: to },
    };
  }
  return undefined;
}

/** The outbox consumer. */
export function createOutbox(o: {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  log: Logger;
  tracer?: Tracer | undefined;
  /** parley_floors: the worker's acknowledgement floor, so a consumer that lost its state does not notify again. */
  floors?: KV | undefined;
}) {
  const log = o.log.child({ component: 'consent-outbox' });

  async function notify(event: ParleyEvent, to: string): Promise<void> {
    const n = noticeFor(event.kind, event.data as OutboxData, to);
    if (!n) return;
    try {
      await request(
        o.nc,
        SELF,
        roomsApi.notify,
        {
          to,
          text: n.text,
          data: n.notice,
          key: `${event.id}:${to}`,
          ...(n.provenance ? { provenance: n.provenance } : {}),
        },
        { timeout: 10_000, tracer: o.tracer },
      );
    } catch (err) {
      // A recipient that no longer exists gets nothing; anything else is retried.
      if (isParleyError(err, 'NOT_FOUND')) return;
      throw err;
    }
  }

  async function handle(m: JsMsg): Promise<void> {
    const event = ParleyEvent.parse(JSON.parse(dec.decode(m.data)));
    const d = event.data as OutboxData;
    for (const to of d.notify ?? []) await notify(event, to);
    if ((event.kind === 'revoked' || (event.kind === 'blocked' && d.endedContact)) && d.a && d.b) {
      const r = await request(
        o.nc,
        SELF,
        roomsApi.contactRevoked,
        { a: d.a, b: d.b, by: d.by ?? d.a },
        { timeout: 30_000, tracer: o.tracer },
      );
      if (r.marked.length || r.removed.length) {
        log.info(
          { a: d.a, b: d.b, marked: r.marked.length, removed: r.removed.length },
          'rooms applied the revocation',
        );
      }
    }
  }

  return durableWorker({
    js: o.js,
    jsm: o.jsm,
    stream: streams.events,
    consumer: {
      durable_name: OUTBOX_CONSUMER,
      filter_subject: subjects.eventsOf('consent'),
      ack_policy: AckPolicy.Explicit,
      // One at a time, in stream order: a participant's notices keep the order of the changes.
      max_ack_pending: 1,
      ack_wait: nanos(60_000),
      max_deliver: -1,
    },
    maxMessages: 16,
    // From the events after its creation, by sequence (see fromEnd).
    fromEnd: true,
    floors: o.floors,
    handle,
    log,
    retry: (m, err) => {
      if (m.info.deliveryCount >= MAX_ATTEMPTS) {
        log.error({ err, subject: m.subject, seq: m.seq }, 'consent event given up after repeated failures');
        return 'term';
      }
      log.warn(
        { err: (err as Error).message, subject: m.subject },
        'consent event not handled yet; will retry',
      );
      return Math.min(250 * 2 ** (m.info.deliveryCount - 1), 10_000);
    },
  });
}
