/**
 * What a JetStream refusal means, read from its error code (the `err_code` of the JetStream API
 * reply), never from its message text: the codes are the server's stable contract
 * (nats-server `errors.json`), the descriptions are not. `@nats-io/kv` classifies its own
 * compare-and-set failures the same way.
 */
import { JetStreamApiError } from '@nats-io/jetstream';

/** JetStream API error codes Parley acts on (nats-server `errors.json`). */
export const JsErrorCode = {
  /** `JetStream system temporarily unavailable` (JSClusterNotAvailErr): no leader for the asset or the meta group, as the answering server sees it. */
  ClusterNotAvailable: 10008,
  /** `consumer name already in use` (JSConsumerNameExistErr; also a push consumer whose deliver subject is live). */
  ConsumerNameInUse: 10013,
  /** `consumer not found` (JSConsumerNotFoundErr). */
  ConsumerNotFound: 10014,
  /** `stream name already in use with a different configuration` (JSStreamNameExistErr). */
  StreamNameInUse: 10058,
  /** `stream not found` (JSStreamNotFoundErr). */
  StreamNotFound: 10059,
  /** `wrong last sequence: N` (JSStreamWrongLastSequenceErrF): a compare-and-set lost. */
  WrongLastSequence: 10071,
  /** `consumer already exists` (JSConsumerExistingActiveErr). */
  ConsumerExistingActive: 10105,
  /** `consumer already exists` (JSConsumerAlreadyExists, servers from 2.10). */
  ConsumerAlreadyExists: 10148,
  /** `wrong last sequence` without the number (JSStreamWrongLastSequenceConstantErr, newer servers). */
  WrongLastSequenceUnknown: 10164,
} as const;

/**
 * The JetStream API error code of `err`, or undefined when it is not a JetStream refusal. Reads
 * the client's `JetStreamApiError` and also any error carrying a numeric JetStream `code` of the
 * 10000 range (the kit's `JsPublishError`).
 */
export function jsErrorCode(err: unknown): number | undefined {
  if (err instanceof JetStreamApiError) return err.code;
  if (typeof err !== 'object' || err === null) return undefined;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'number' && code >= 10000 && code < 20000 ? code : undefined;
}

const is =
  (...codes: number[]) =>
  (err: unknown): boolean => {
    const c = jsErrorCode(err);
    return c !== undefined && codes.includes(c);
  };

/** True when a write failed its compare-and-set (a KV create of an existing key, a stale revision, an expected last sequence that moved on). */
export const isKvConflict: (err: unknown) => boolean = is(
  JsErrorCode.WrongLastSequence,
  JsErrorCode.WrongLastSequenceUnknown,
);

/**
 * True when the answering server knows no leader for the asset (a consumer's own raft group, or
 * the meta group): "JetStream system temporarily unavailable".
 */
export const isClusterNotAvailable: (err: unknown) => boolean = is(JsErrorCode.ClusterNotAvailable);

/** True when the stream asked for does not exist. */
export const isStreamNotFound: (err: unknown) => boolean = is(JsErrorCode.StreamNotFound);

/** True when the consumer asked for does not exist (its stream does). */
export const isConsumerNotFound: (err: unknown) => boolean = is(JsErrorCode.ConsumerNotFound);

/** True when a stream could not be added because one of that name exists. */
export const isStreamExists: (err: unknown) => boolean = is(JsErrorCode.StreamNameInUse);

/**
 * True when a consumer could not be added or changed because one of that name exists with another
 * configuration, or (push consumers) another subscriber is receiving its deliveries.
 */
export const isConsumerInUse: (err: unknown) => boolean = is(JsErrorCode.ConsumerNameInUse);

/** True when a consumer could not be added because one of that name exists (any server version). */
export const isConsumerExists: (err: unknown) => boolean = is(
  JsErrorCode.ConsumerNameInUse,
  JsErrorCode.ConsumerExistingActive,
  JsErrorCode.ConsumerAlreadyExists,
);
