/**
 * Writing governance's audit records (each with the trace id of the request that caused it) and
 * finding them again. Records are found by time, not by an index: ids are ULIDs, so a tool call's
 * id says when it was authorized, and only a short stretch of one audit subject is read.
 */
import { DeliverPolicy, type JetStreamClient } from '@nats-io/jetstream';
import { AuditRecord, activeTraceIds, streams, subjects } from '@parley/contracts';
import { appendAudit } from '@parley/kit';

/** Appends an audit record, stamped with the active trace id. */
export function audit(
  js: JetStreamClient,
  record: Omit<AuditRecord, 'id' | 'at'> & { id?: string },
): Promise<AuditRecord> {
  const trace = activeTraceIds();
  return appendAudit(js, { ...(trace ? { traceId: trace.traceId } : {}), ...record });
}

/** Options of {@link findAudit}. */
export interface FindAuditOptions {
  /** Audit domain (subject `parley.audit.<domain>`). */
  domain: AuditRecord['domain'];
  /** Read records stored from this time on. */
  from: Date;
  /** Stop at records stored after this time. */
  to: Date;
  /** The records wanted. */
  match: (r: AuditRecord) => boolean;
  /** Stop after this many matches. @default 1 */
  limit?: number;
  /** Stop after reading this many records. @default 100000 */
  maxScanned?: number;
}

const dec = new TextDecoder();

/** Reads one audit subject from `from` until `to` (or its end) and returns the matching records. */
export async function findAudit(js: JetStreamClient, o: FindAuditOptions): Promise<AuditRecord[]> {
  const consumer = await js.consumers.get(streams.audit, {
    filter_subjects: subjects.audit(o.domain),
    deliver_policy: DeliverPolicy.StartTime,
    opt_start_time: o.from.toISOString(),
  });
  const out: AuditRecord[] = [];
  const limit = o.limit ?? 1;
  const maxScanned = o.maxScanned ?? 100_000;
  let scanned = 0;
  try {
    for (;;) {
      const batch = await consumer.fetch({ max_messages: 256, expires: 1_000 });
      let got = 0;
      let done = false;
      for await (const m of batch) {
        got++;
        scanned++;
        if (m.time.getTime() > o.to.getTime()) {
          done = true;
          break;
        }
        const parsed = AuditRecord.safeParse(JSON.parse(dec.decode(m.data)));
        if (parsed.success && o.match(parsed.data)) out.push(parsed.data);
        if (out.length >= limit || scanned >= maxScanned || m.info.pending === 0) {
          done = true;
          break;
        }
      }
      if (done || got === 0) break;
    }
  } finally {
    await consumer.delete().catch(() => undefined);
  }
  return out;
}
