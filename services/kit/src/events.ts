/**
 * Publishing control-plane events (`parley.evt.<domain>.<kind>`, stream PARLEY_EVENTS) and audit
 * records (`parley.audit.<domain>`, stream PARLEY_AUDIT). Each carries its id as `Nats-Msg-Id`, so
 * a retried publish (or two replicas reporting the same thing with a deterministic id) is stored once.
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/transport-node';
import {
  AuditRecord,
  encodeJson,
  headerNames,
  newId,
  ParleyEvent,
  type PrincipalId,
  subjects,
} from '@parley/contracts';

/** What an event says; id and time are filled in when absent. */
export interface EventInput {
  domain: string;
  kind: string;
  actor?: PrincipalId;
  /** The id the event is about. */
  subject?: string;
  data?: Record<string, unknown>;
  /** A deterministic id, when several replicas may publish the same event. @default a new evt_ id */
  id?: string;
  /** @default now */
  at?: string;
}

/** Publishes an event to PARLEY_EVENTS and resolves with it once stored. */
export async function publishEvent(js: JetStreamClient, input: EventInput): Promise<ParleyEvent> {
  const event = ParleyEvent.parse({
    id: input.id ?? newId('event'),
    domain: input.domain,
    kind: input.kind,
    at: input.at ?? new Date().toISOString(),
    ...(input.actor ? { actor: input.actor } : {}),
    ...(input.subject ? { subject: input.subject } : {}),
    data: input.data ?? {},
  });
  const h = natsHeaders();
  h.set(headerNames.msgId, event.id);
  await js.publish(subjects.event(event.domain, event.kind), encodeJson(event), { headers: h });
  return event;
}

/** What an audit record says; id and time are filled in when absent. */
export type AuditInput = Omit<AuditRecord, 'id' | 'at'> & { id?: string; at?: string };

/** Appends an audit record to PARLEY_AUDIT (no delete, no purge) and resolves once stored. */
export async function publishAudit(js: JetStreamClient, input: AuditInput): Promise<AuditRecord> {
  const record = AuditRecord.parse({
    ...input,
    id: input.id ?? newId('event'),
    at: input.at ?? new Date().toISOString(),
  });
  const h = natsHeaders();
  h.set(headerNames.msgId, record.id);
  await js.publish(subjects.audit(record.domain), encodeJson(record), { headers: h });
  return record;
}
