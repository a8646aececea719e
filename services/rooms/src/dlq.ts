/**
 * Dead letters. When a participant's inbox consumer gives up on a delivery (max deliveries), the
 * server publishes an advisory, kept in PARLEY_ADVISORIES. One rooms replica at a time handles each:
 * the message goes to `parley.dlq.<recipient>` (PARLEY_DLQ), an audit record and an event are
 * written, and the sender is told by a private notice in the room log that only it receives.
 */
import { AckPolicy, type JetStreamClient, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { nanos } from '@nats-io/transport-node';
import {
  type DeadLetter,
  encodeJson,
  headerNames,
  isInboxStream,
  isParticipantId,
  partitionOf,
  type RoomMessage,
  roomOf,
  streams,
  subjects,
} from '@parley/contracts';
import type { Logger } from '@parley/kit';
import { appendAudit, durableWorker, publishEvent } from '@parley/kit';
import { appendEntry, systemEntry } from './room-log.js';

const dec = new TextDecoder();
const CONSUMER = 'rooms_dlq';

interface MaxDeliveriesAdvisory {
  stream: string;
  consumer: string;
  stream_seq: number;
  deliveries: number;
}

export function createDeadLetters(o: {
  js: JetStreamClient;
  jsm: JetStreamManager;
  partitions: number;
  log: Logger;
  /** parley_floors: the worker's acknowledgement floor, so a consumer that lost its state does not notify again. */
  floors?: KV | undefined;
}) {
  const log = o.log.child({ component: 'dlq' });

  async function handle(m: JsMsg): Promise<void> {
    const a = JSON.parse(dec.decode(m.data)) as MaxDeliveriesAdvisory;
    const recipient = a.consumer;
    if (!isInboxStream(a.stream) || !isParticipantId(recipient)) return;
    const stored = await o.jsm.direct.getMessage(a.stream, { seq: a.stream_seq });
    if (!stored) {
      log.warn({ advisory: a }, 'dead letter no longer in the inbox stream');
      return;
    }
    const message = JSON.parse(dec.decode(stored.data)) as RoomMessage;
    const room = roomOf(stored.subject);
    const roomSeq = Number(stored.header.get(headerNames.roomSeq)) || 0;
    const letter: DeadLetter = {
      recipient,
      room,
      roomSeq,
      deliveries: a.deliveries,
      at: new Date().toISOString(),
      message: message as unknown as Record<string, unknown>,
    };
    await o.js.publish(subjects.dlq(recipient), encodeJson(letter), { msgID: `dlq:${a.stream_seq}` });
    await appendAudit(o.js, {
      id: `dlq_${a.stream_seq}`,
      domain: 'delivery',
      action: 'dead_letter',
      actor: 'svc_rooms',
      target: recipient,
      room,
      message: message.id,
      ...(message.causedBy ? { causedBy: message.causedBy } : {}),
      data: { roomSeq, deliveries: a.deliveries, sender: message.sender.id },
    });
    await publishEvent(o.js, 'rooms', 'dead_letter', {
      actor: 'svc_rooms',
      subject: room,
      data: { recipient, message: message.id, roomSeq, deliveries: a.deliveries },
    });
    if (isParticipantId(message.sender.id) && message.sender.id !== recipient) {
      const notice = systemEntry(
        room,
        'svc_rooms',
        'system',
        { event: 'dead_letter', recipient, message: message.id, roomSeq, deliveries: a.deliveries },
        { mentions: [message.sender.id], audience: 'mentions' },
      );
      notice.parts.unshift({
        type: 'text',
        text: `Your message ${message.id} could not be handled by ${recipient} after ${a.deliveries} attempts; it is in the dead-letter queue.`,
      });
      await appendEntry(
        o.js,
        { id: room, partition: partitionOf(room, o.partitions) },
        notice,
        `dlq-notice:${a.stream_seq}`,
      );
    }
    log.warn({ recipient, room, roomSeq, message: message.id }, 'delivery dead-lettered');
  }

  return durableWorker({
    js: o.js,
    jsm: o.jsm,
    stream: streams.advisories,
    consumer: {
      durable_name: CONSUMER,
      ack_policy: AckPolicy.Explicit,
      ack_wait: nanos(30_000),
      max_deliver: -1,
    },
    maxMessages: 64,
    handle,
    log,
    floors: o.floors,
    retry: (_m, err) => {
      log.error({ err }, 'dead letter not recorded; will retry');
      return 1_000;
    },
  });
}
