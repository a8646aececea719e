import type { JetStreamClient } from '@nats-io/jetstream';
import { type AuditRecord, encodeJson, newId, type ParleyEvent, subjects } from '@parley/contracts';

/** What an event says; `id` and `at` are filled in. */
export interface EventInput {
  actor?: string;
  subject?: string;
  data?: Record<string, unknown>;
  traceId?: string;
  /**
   * A deterministic id, when several replicas may publish the same event (JetStream keeps one).
   * @default a new evt_ id
   */
  id?: string;
  /** When it happened. @default now */
  at?: string;
}

/** Publishes a control-plane event to `parley.evt.<domain>.<kind>` (stream PARLEY_EVENTS). */
export async function publishEvent(
  js: JetStreamClient,
  domain: string,
  kind: string,
  input: EventInput = {},
): Promise<ParleyEvent> {
  const event: ParleyEvent = {
    id: input.id ?? newId('event'),
    domain,
    kind,
    at: input.at ?? new Date().toISOString(),
    data: input.data ?? {},
    ...(input.actor ? { actor: input.actor } : {}),
    ...(input.subject ? { subject: input.subject } : {}),
    ...(input.traceId ? { traceId: input.traceId } : {}),
  };
  await js.publish(subjects.event(domain, kind), encodeJson(event), { msgID: event.id });
  return event;
}

/** Appends an audit record to `parley.audit.<domain>` (stream PARLEY_AUDIT: no delete, no purge). */
export async function appendAudit(
  js: JetStreamClient,
  record: Omit<AuditRecord, 'id' | 'at'> & { id?: string },
): Promise<AuditRecord> {
  const full: AuditRecord = { ...record, id: record.id ?? newId('event'), at: new Date().toISOString() };
  await js.publish(subjects.audit(full.domain), encodeJson(full), { msgID: full.id });
  return full;
}
