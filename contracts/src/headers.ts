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
  /** On a delivery: the recipient the fan-out addressed. */
  recipient: 'Parley-Recipient',
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
