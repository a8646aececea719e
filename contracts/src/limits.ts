/**
 * Default size limits of the protocol. Services may be configured lower or higher within what the
 * NATS server's `max_payload` allows (1 MiB by default).
 */
export const limits = {
  /** Largest encoded send request the ingress accepts, in bytes. @default 262144 (256 KiB) */
  maxMessageBytes: 256 * 1024,
  /** Largest encoded API request, in bytes. @default 65536 (64 KiB) */
  maxRequestBytes: 64 * 1024,
  /** Most parts in one message. @default 32 */
  maxParts: 32,
  /** Most mentions in one message. @default 64 */
  maxMentions: 64,
  /** Longest text part, in characters. @default 131072 */
  maxTextChars: 128 * 1024,
  /** Longest client message id. @default 64 */
  maxClientMsgIdChars: 64,
  /** Largest page of history or of a listing. @default 200 */
  maxPageSize: 200,
} as const;
