/**
 * Avro payloads of the Pub/Sub API (avsc) and the bitmap-encoded field lists of Change Data
 * Capture: in `ChangeEventHeader.changedFields` (and `nulledFields`, `diffFields`) the Pub/Sub API
 * sends bitmaps instead of names. Element `0x…` is a bitmap over the top-level fields of the
 * event's schema (bit i, from the least significant, is field i); an element `N-0x…` is a bitmap
 * over the nested fields of top-level field N (a compound field such as an address), naming
 * `Parent.Child`.
 */
import avro from 'avsc';

/** An Avro type of a schema. */
export type AvroType = avro.Type;

/** Parses an Avro schema (the JSON of `SchemaInfo.schema_json`). */
export function parseSchema(schemaJson: string): AvroType {
  return avro.Type.forSchema(JSON.parse(schemaJson), { wrapUnions: false });
}

interface RecordLike {
  fields: { name: string; type: AvroType }[];
}

function recordOf(t: AvroType): RecordLike | undefined {
  if (t.typeName === 'record') return t as unknown as RecordLike;
  // [null, record] unions: the record inside.
  const types = (t as unknown as { types?: AvroType[] }).types;
  return types?.map(recordOf).find((r) => r !== undefined);
}

function bitsOf(hex: string): number[] {
  const n = BigInt(hex);
  const out: number[] = [];
  for (let i = 0; n >> BigInt(i) > 0n; i++) if ((n >> BigInt(i)) & 1n) out.push(i);
  return out;
}

/** Decodes a bitmap field list into field names; plain names (a CometD-style list) pass through. */
export function decodeFieldBitmap(type: AvroType, encoded: readonly string[]): string[] {
  const top = recordOf(type)?.fields ?? [];
  const names: string[] = [];
  for (const el of encoded) {
    const nested = /^(\d+)-(0x[0-9a-fA-F]+)$/.exec(el);
    if (nested) {
      const parent = top[Number(nested[1])];
      const inner = parent ? (recordOf(parent.type)?.fields ?? []) : [];
      for (const i of bitsOf(nested[2] as string)) {
        const child = inner[i];
        if (parent && child) names.push(`${parent.name}.${child.name}`);
      }
    } else if (/^0x[0-9a-fA-F]+$/.test(el)) {
      for (const i of bitsOf(el)) {
        const f = top[i];
        if (f) names.push(f.name);
      }
    } else {
      names.push(el);
    }
  }
  return names;
}

/** Encodes field names as a Pub/Sub API bitmap list (what the test server sends). */
export function encodeFieldBitmap(type: AvroType, names: readonly string[]): string[] {
  const top = recordOf(type)?.fields ?? [];
  let main = 0n;
  const nested = new Map<number, bigint>();
  for (const name of names) {
    const [parent, child] = name.split('.');
    const i = top.findIndex((f) => f.name === parent);
    if (i < 0) continue;
    if (child === undefined) {
      main |= 1n << BigInt(i);
      continue;
    }
    const j = (recordOf((top[i] as { type: AvroType }).type)?.fields ?? []).findIndex(
      (f) => f.name === child,
    );
    if (j >= 0) nested.set(i, (nested.get(i) ?? 0n) | (1n << BigInt(j)));
  }
  const hex = (n: bigint) => `0x${n.toString(16).toUpperCase()}`;
  return [
    ...(main || nested.size === 0 ? [hex(main)] : []),
    ...[...nested].map(([i, n]) => `${i}-${hex(n)}`),
  ];
}

/**
 * Decodes a payload and, for a change event, replaces the bitmap lists of its ChangeEventHeader
 * with field names. Throws when the bytes are not a value of the schema.
 */
export function decodeEvent(type: AvroType, payload: Buffer): Record<string, unknown> {
  const value = type.fromBuffer(payload) as Record<string, unknown>;
  const header = value.ChangeEventHeader as Record<string, unknown> | undefined;
  if (header) {
    for (const key of ['changedFields', 'nulledFields', 'diffFields']) {
      const list = header[key];
      if (Array.isArray(list)) header[key] = decodeFieldBitmap(type, list as string[]);
    }
  }
  return value;
}
