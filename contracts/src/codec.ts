import type * as z from 'zod';
import { invalidArgument, ParleyError } from './errors.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

/** Encodes a value as UTF-8 JSON, the encoding of every Parley payload. */
export function encodeJson(value: unknown): Uint8Array {
  return encoder.encode(JSON.stringify(value));
}

/** Options of {@link decodeJson}. */
export interface DecodeOptions {
  /** Refuse payloads larger than this many bytes with `PAYLOAD_TOO_LARGE`. */
  maxBytes?: number;
  /** What is being decoded, for error messages. @default "request" */
  what?: string;
}

/**
 * Decodes UTF-8 JSON and validates it with `schema`. Every failure is a {@link ParleyError}:
 * `PAYLOAD_TOO_LARGE` past `maxBytes`, `INVALID_ARGUMENT` for bytes that are not UTF-8 JSON or do not
 * match the schema (naming the failing fields).
 */
export function decodeJson<S extends z.ZodType>(
  schema: S,
  data: Uint8Array,
  options: DecodeOptions = {},
): z.output<S> {
  const what = options.what ?? 'request';
  if (options.maxBytes !== undefined && data.length > options.maxBytes) {
    throw new ParleyError(
      'PAYLOAD_TOO_LARGE',
      `${what} is ${data.length} bytes; the limit is ${options.maxBytes}`,
      { details: { size: data.length, limit: options.maxBytes } },
    );
  }
  let value: unknown;
  try {
    value = data.length === 0 ? {} : JSON.parse(decoder.decode(data));
  } catch {
    throw new ParleyError('INVALID_ARGUMENT', `${what} is not valid UTF-8 JSON`);
  }
  const result = schema.safeParse(value);
  if (!result.success) throw invalidArgument(result.error, what);
  return result.data;
}

/** Parses an already-decoded value with `schema`, throwing `INVALID_ARGUMENT` on failure. */
export function parseWith<S extends z.ZodType>(schema: S, value: unknown, what = 'value'): z.output<S> {
  const result = schema.safeParse(value);
  if (!result.success) throw invalidArgument(result.error, what);
  return result.data;
}
