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
  /** Deepest nesting of objects and arrays inside a data part. @default 32 */
  maxDataDepth: 32,
  /** Most entries in a send's `metadata`. @default 64 */
  maxMetadataEntries: 64,
} as const;

/**
 * How deeply `value` nests objects and arrays (a scalar is 0), counted without recursion so a
 * hostile 10,000-level document cannot exhaust the stack; stops counting past `stopAt`.
 */
export function jsonDepth(value: unknown, stopAt = Number.POSITIVE_INFINITY): number {
  let max = 0;
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [v, d] = stack.pop() as [unknown, number];
    if (v === null || typeof v !== 'object') continue;
    const depth = d + 1;
    if (depth > max) max = depth;
    if (max > stopAt) return max;
    for (const child of Array.isArray(v) ? v : Object.values(v)) stack.push([child, depth]);
  }
  return max;
}
