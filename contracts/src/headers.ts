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
  /**
   * On a delivery: when the room log stored the entry (ms since the epoch, by its leader's clock).
   * With `Parley-Room-Seq` it names the entry: an entry written again under its message id after
   * JetStream lost it can be stored at the position it held before, and only the time tells them apart.
   */
  roomTime: 'Parley-Room-Time',
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

/**
 * nats.js 3.4's `MsgHdrs` lists every key into a new array on each `get`, `has` and `set`,
 * canonicalises the key and tests the value with a regular expression: on the message path, where
 * each room entry's headers are read several times and each inbox write sets six, that was 6% of the
 * rooms service's CPU and a share of its garbage. {@link headerOf} and {@link setHeader} read and
 * write nats.js's header map directly for a name spelled exactly (what `get`/`set` do by default,
 * and the same bytes on the wire), and use the `MsgHdrs` methods for anything else.
 */
interface HeaderMap {
  readonly headers?: unknown;
}

function mapOf(h: object): Map<string, string[]> | undefined {
  const map = (h as HeaderMap).headers;
  return map instanceof Map ? (map as Map<string, string[]>) : undefined;
}

/** The first value of header `name` (exact spelling), or undefined when absent or empty. */
export function headerOf(h: { get(name: string): string } | undefined, name: string): string | undefined {
  if (!h) return undefined;
  const map = mapOf(h);
  return (map ? map.get(name)?.[0] : h.get(name)) || undefined;
}

/** A value nats.js would store unchanged: no line break, no surrounding space. */
const storedAsIs = (value: string) =>
  value.indexOf('\n') < 0 &&
  value.indexOf('\r') < 0 &&
  (value.length === 0 || (value.charCodeAt(0) > 32 && value.charCodeAt(value.length - 1) > 32));

/** Sets header `name` (one of Parley's valid names, spelled exactly) to `value`, replacing what it had. */
export function setHeader(h: { set(name: string, value: string): void }, name: string, value: string): void {
  const map = mapOf(h);
  if (map && storedAsIs(value)) {
    // As nats.js does: a replaced header moves to the end.
    map.delete(name);
    map.set(name, [value]);
  } else h.set(name, value);
}
