/** NATS header names Parley reads and writes. */
export const headerNames = {
  /** On an error reply: the {@link ErrorCode}. The body is an ErrorEnvelope. */
  error: 'Parley-Error',
  /** On a delivery: the message's sequence in the room log. */
  roomSeq: 'Parley-Room-Seq',
  /**
   * On a delivery: the room sequence of the previous message of this room delivered to this
   * recipient (absent for the first). A jump tells the SDK to backfill from history.
   */
  prevSeq: 'Parley-Prev-Seq',
  /**
   * On a delivery: the room position of the recipient's previous delivery in this room, which the
   * room log no longer holds (JetStream lost it after a fault and went on from an earlier position).
   * This delivery's own position may be at or below it; `Parley-Prev-Seq` names where the room goes
   * on from. Absent on every other delivery.
   */
  rewound: 'Parley-Rewound',
  /** On a room-log entry: its kind, so the fan-out routes without parsing the body. */
  kind: 'Parley-Kind',
  /** On a room-log entry: the sender's id. */
  sender: 'Parley-Sender',
  /** On a room-log entry: comma-separated mentioned participant ids (absent when none). */
  mentions: 'Parley-Mentions',
  /**
   * On a room-log entry: `mentions` when only the mentioned participants may receive or read it
   * (private notices, e.g. "your message went to the dead-letter queue").
   */
  audience: 'Parley-Audience',
  /** On a delivery: the message id (so a recipient can drop a duplicate without parsing). */
  messageId: 'Parley-Msg-Id',
  /** JetStream optimistic concurrency: the publish fails unless this is the subject's last sequence. */
  expectedLastSubjectSeq: 'Nats-Expected-Last-Subject-Sequence',
  /** JetStream de-duplication id. */
  msgId: 'Nats-Msg-Id',
  /** W3C trace context. */
  traceparent: 'traceparent',
  /** W3C trace state. */
  tracestate: 'tracestate',
  /** W3C baggage. */
  baggage: 'baggage',
  /** The services framework's error headers, set alongside Parley-Error for generic NATS tools. */
  serviceError: 'Nats-Service-Error',
  serviceErrorCode: 'Nats-Service-Error-Code',
} as const;
