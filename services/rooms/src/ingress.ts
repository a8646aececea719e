/**
 * The message ingress: request/reply on `parley.in.<id>.send`, any number of replicas in one queue
 * group. A message is validated, checked against the room, stamped (sender, time, hop, trace) and
 * appended to the room log with `Nats-Msg-Id = <sender>:<clientMsgId>`, so a client's retry is
 * de-duplicated; the reply `{ id, roomSeq }` goes out only after JetStream stored it.
 */
import type { JetStreamManager } from '@nats-io/jetstream';
import type { Msg } from '@nats-io/transport-node';
import {
  type Context,
  callerOf,
  decodeJson,
  type ErrorCode,
  encodeJson,
  extractContext,
  headerNames,
  isParticipantId,
  natsHeadersGetter,
  newId,
  otelApi,
  ParleyError,
  type RoomMessage,
  runInSpan,
  SendRequest,
  type SendRequestParsed,
  type Span,
  startMessagingSpan,
  subjects,
  type Tracer,
  traceAttributes,
  traceFieldsOf,
} from '@parley/contracts';
import type { Logger } from '@parley/kit';
import {
  type JsPublisher,
  type MicroService,
  type ParleyMetrics,
  respondError,
  respondTo,
  toParleyError,
} from '@parley/kit';
import type { PolicyCache } from './policy-cache.js';
import type { RoomCache } from './room-cache.js';
import { entryHeaders, senderOf, storedMessageId } from './room-log.js';
import type { RoomRecord } from './room-store.js';

/** What a guard sees of a send. */
export interface GuardedSend {
  sender: string;
  request: SendRequestParsed;
  room: RoomRecord;
}

/**
 * A check every send passes before it is appended to the room log (rate limits, delegation,
 * loop detection…). It refuses by throwing a ParleyError, and may return verified facts to stamp
 * on the stored message.
 */
export interface SendGuard {
  readonly name: string;
  admit(
    send: GuardedSend,
  ): Promise<Pick<RoomMessage, 'onBehalfOf'> | undefined> | Pick<RoomMessage, 'onBehalfOf'> | undefined;
}

/** What the ingress needs. */
export interface IngressDeps {
  jsm: JetStreamManager;
  /** Room-log appends (PubAcks paired without nats.js building an Error per completed request). */
  publisher: JsPublisher;
  rooms: RoomCache;
  policy: PolicyCache;
  tracer?: Tracer;
  metrics?: ParleyMetrics;
  /** Checks run in order after membership; see {@link SendGuard}. */
  guards?: SendGuard[];
  log: Logger;
  maxMessageBytes: number;
  hopLimit: number;
}

/** Least time between two log lines about sends refused UNAVAILABLE, ms. */
const UNAVAILABLE_LOG_MS = 5_000;

const TRACEPARENT = /^[\da-f]{2}-[\da-f]{32}-[\da-f]{16}-[\da-f]{2}$/;
/** Refusals that are policy decisions (counted as denials by reason). */
const DENIALS = new Set<ErrorCode>([
  'SUSPENDED',
  'REVOKED',
  'RATE_LIMITED',
  'BUDGET_EXCEEDED',
  'HOP_LIMIT',
  'ROOM_PAUSED',
  'PERMISSION_DENIED',
  'NO_CONSENT',
]);

/**
 * The sender's trace context as sent, when this process propagates none itself (a header whose
 * name a bridge changed the case of included, as extraction reads it).
 */
function requestTrace(msg: Msg): RoomMessage['trace'] {
  if (!msg.headers) return undefined;
  const traceparent = natsHeadersGetter.get(msg.headers, headerNames.traceparent);
  if (typeof traceparent !== 'string' || !TRACEPARENT.test(traceparent)) return undefined;
  const tracestate = natsHeadersGetter.get(msg.headers, headerNames.tracestate);
  return { traceparent, ...(typeof tracestate === 'string' && tracestate ? { tracestate } : {}) };
}

/** Serves `parley.in.*.send` on `micro`. */
export function serveIngress(micro: MicroService, deps: IngressDeps): void {
  const endpoint = micro.endpoint({ name: 'send', subject: subjects.sendListen(), queue: 'rooms-ingress' });
  const log = deps.log.child({ component: 'ingress' });
  const watch = { log, metrics: deps.metrics };

  // Sends refused because JetStream did not answer: logged at most once per UNAVAILABLE_LOG_MS, with
  // how many more since (a sender retries every few hundred ms through an outage).
  let quietSince = 0;
  let unsaid = 0;
  function unavailable(e: ParleyError): void {
    const now = Date.now();
    if (now - quietSince < UNAVAILABLE_LOG_MS) {
      unsaid++;
      return;
    }
    log.warn({ err: e.message, more: unsaid }, 'send refused UNAVAILABLE (the sender retries)');
    quietSince = now;
    unsaid = 0;
  }

  async function room(roomId: string, sender: string): Promise<RoomRecord> {
    let r = await deps.rooms.get(roomId);
    // A refusal is confirmed against the bucket: the watch may be a moment behind.
    if (!r?.members[sender] || r.closed) r = await deps.rooms.get(roomId, true);
    if (!r) throw new ParleyError('NOT_FOUND', `room ${roomId} does not exist`);
    const m = r.members[sender];
    if (!m) throw new ParleyError('NOT_A_MEMBER', `${sender} is not a member of room ${roomId}`);
    if (r.closed) throw new ParleyError('ROOM_CLOSED', `room ${roomId} is closed`);
    if (m.role === 'observer')
      throw new ParleyError('NOT_A_MEMBER', 'observers read a room but do not send to it');
    return r;
  }

  async function handle(msg: Msg): Promise<string | undefined> {
    // A server span per send, child of the sender's span; the stored message carries this span's
    // context, so the fan-out and every delivery continue the same trace.
    const parent = extractContext(msg.headers, otelApi?.ROOT_CONTEXT);
    const span = startMessagingSpan(deps.tracer, {
      operation: 'process',
      destination: msg.subject,
      target: 'send',
      bodySize: msg.data.length,
      parent,
      ...(otelApi ? { kind: otelApi.SpanKind.SERVER } : {}),
    });
    try {
      // A recording span is made active around the send, so what the guards call joins its trace.
      // A non-recording one (propagate mode, an unsampled sender) is only passed to the trace
      // fields: entering an OpenTelemetry context (AsyncLocalStorage) per send is work for a trace
      // nobody keeps (its saving was within the bench's run-to-run spread).
      const duplicate = span?.isRecording()
        ? await runInSpan(span, () => accept(msg, span), parent)
        : await accept(msg, span, span && otelApi?.trace.setSpan(parent, span)).finally(() => span?.end());
      deps.metrics?.recordMessage(duplicate ? 'duplicate' : 'accepted', 'OK');
      return undefined;
    } catch (err) {
      const e = toParleyError(err, log);
      if (e.code === 'UNAVAILABLE') unavailable(e);
      respondError(msg, e, watch);
      deps.metrics?.recordMessage('refused', e.code);
      if (DENIALS.has(e.code)) deps.metrics?.recordDenial(e.code);
      return `${e.code}: ${e.message}`;
    }
  }

  /** Validates, checks, stamps and stores one send, and replies; resolves whether it was a retry. */
  async function accept(msg: Msg, span: Span | undefined, ctx?: Context): Promise<boolean> {
    {
      const sender = callerOf(msg.subject);
      if (!isParticipantId(sender))
        throw new ParleyError('UNAUTHENTICATED', `${sender} is not a participant`);
      deps.policy.check(sender);
      const req = decodeJson(SendRequest, msg.data, { maxBytes: deps.maxMessageBytes, what: 'message' });
      if (req.hop > deps.hopLimit) {
        throw new ParleyError('HOP_LIMIT', `hop ${req.hop} exceeds the limit of ${deps.hopLimit}`, {
          details: { hop: req.hop, limit: deps.hopLimit },
        });
      }
      const r = await room(req.room, sender);
      let stamped: Pick<RoomMessage, 'onBehalfOf'> = {};
      for (const guard of deps.guards ?? []) {
        const admitted = guard.admit({ sender, request: req, room: r });
        // Most guards answer synchronously: awaiting only promises saves a microtask per guard.
        const facts = admitted instanceof Promise ? await admitted : admitted;
        if (facts) stamped = { ...stamped, ...facts };
      }
      const trace = traceFieldsOf(ctx) ?? requestTrace(msg);
      const message: RoomMessage = {
        id: newId('message'),
        room: r.id,
        sender: senderOf(sender),
        kind: req.kind,
        parts: req.parts,
        mentions: req.mentions,
        hop: req.hop,
        clientMsgId: req.clientMsgId,
        sentAt: new Date().toISOString(),
        ...(req.replyTo ? { replyTo: req.replyTo } : {}),
        ...(req.causedBy ? { causedBy: req.causedBy } : {}),
        ...(req.task ? { task: req.task } : {}),
        ...(req.provenance ? { provenance: req.provenance } : {}),
        ...(req.metadata ? { metadata: req.metadata } : {}),
        ...stamped,
        ...(trace ? { trace } : {}),
      };
      if (span?.isRecording()) {
        span.setAttributes({
          [traceAttributes.roomId]: r.id,
          [traceAttributes.sender]: sender,
          [traceAttributes.messageId]: message.id,
          ...(message.onBehalfOf ? { [traceAttributes.onBehalfOf]: message.onBehalfOf.principal } : {}),
        });
      }
      const ack = await deps.publisher
        .publish(subjects.room(r.partition, r.id), encodeJson(message), {
          msgID: `${sender}:${req.clientMsgId}`,
          headers: entryHeaders(message),
        })
        .catch((err: unknown) => {
          // Not stored (JetStream unavailable, timeout): the client retries with the same id.
          throw new ParleyError(
            'UNAVAILABLE',
            `the room log did not accept the message: ${(err as Error).message}`,
            {
              cause: err,
              retryAfterMs: 250,
            },
          );
        });
      // A retry: answer with the id of the message stored the first time (never with this copy's,
      // which was not stored).
      const id = ack.duplicate
        ? await storedMessageId(deps.jsm, ack.seq).catch((err: unknown) => {
            throw new ParleyError(
              'UNAVAILABLE',
              `the room log could not be read: ${(err as Error).message}`,
              {
                cause: err,
                retryAfterMs: 250,
              },
            );
          })
        : message.id;
      span?.setAttribute(traceAttributes.roomSeq, ack.seq);
      respondTo(
        msg,
        encodeJson(ack.duplicate ? { id, roomSeq: ack.seq, duplicate: true } : { id, roomSeq: ack.seq }),
        { watch },
      );
      return ack.duplicate;
    }
  }

  micro.subscribe(subjects.sendListen(), 'rooms-ingress', (msg) => endpoint.run(() => handle(msg)));
}
