import * as z from 'zod';

/** Metadata kept for every schema that is part of the published protocol. */
export interface ProtocolSchemaMeta {
  /** Stable name of the schema: the file name in `docs/protocol/schemas/` and the AsyncAPI component. */
  id: string;
}

/**
 * Every wire schema that bridges in other languages need is registered here under a stable name.
 * The protocol generator (`scripts/generate.ts`) turns the registry into JSON Schema files and the
 * AsyncAPI document, so a name registered here is a published name.
 */
export const protocolSchemas = z.registry<ProtocolSchemaMeta>();

/** Registers `schema` in the protocol under `id` and returns it unchanged. */
export function named<T extends z.ZodType>(id: string, schema: T): T {
  const existing = protocolSchemas.get(schema);
  if (existing && existing.id !== id) {
    throw new Error(`one schema instance cannot be named twice: ${existing.id} and ${id}`);
  }
  protocolSchemas.add(schema, { id });
  return schema;
}
