/**
 * Task records in the `parley_tasks` bucket, one key per task (`task.<id>`). The record is the task
 * without its revision: the revision is the KV entry's, so `expectedRevision` in the API is exactly
 * the compare-and-set the bucket does.
 */
import type { KV } from '@nats-io/kv';
import { ParleyError, type Task } from '@parley/contracts';
import { isKvConflict } from '@parley/kit';

/** What is stored: the task without its revision. */
export type TaskRecord = Omit<Task, 'revision'>;

/** The key of a task. */
export const taskKey = (id: string) => `task.${id}`;

/** Every task key (for the watch that keeps deadlines, leases and listings). */
export const ALL_TASKS = 'task.*';

const enc = new TextEncoder();

/** A task with the revision it was read at. */
export function withRevision(record: TaskRecord, revision: number): Task {
  return { ...record, revision };
}

/** Reads a task; NOT_FOUND when there is none. */
export async function readTask(kv: KV, id: string): Promise<{ record: TaskRecord; revision: number }> {
  const e = await kv.get(taskKey(id));
  if (e?.operation !== 'PUT' || e.length === 0)
    throw new ParleyError('NOT_FOUND', `task ${id} does not exist`);
  return { record: e.json<TaskRecord>(), revision: e.revision };
}

/** Stores a new task; resolves with its first revision. */
export async function createTask(kv: KV, record: TaskRecord): Promise<number> {
  return kv.create(taskKey(record.id), enc.encode(JSON.stringify(record)));
}

/**
 * Read-modify-write with compare-and-set. `change` returns the new record, or `undefined` to leave
 * it; it may throw to refuse. With `expectedRevision` a moved revision is CONFLICT, not a retry:
 * the caller decided on a state it no longer sees.
 */
export async function updateTask(
  kv: KV,
  id: string,
  change: (current: TaskRecord, revision: number) => TaskRecord | undefined,
  options: { expectedRevision?: number; attempts?: number } = {},
): Promise<{ before: TaskRecord; after: TaskRecord; revision: number; changed: boolean }> {
  for (let i = 0; i < (options.attempts ?? 20); i++) {
    const { record, revision } = await readTask(kv, id);
    if (options.expectedRevision !== undefined && options.expectedRevision !== revision) {
      throw new ParleyError(
        'CONFLICT',
        `task ${id} is at revision ${revision}, not ${options.expectedRevision}`,
        {
          details: { revision, state: record.state },
        },
      );
    }
    const before = structuredClone(record);
    const next = change(record, revision);
    if (next === undefined) return { before, after: before, revision, changed: false };
    try {
      const r = await kv.update(taskKey(id), enc.encode(JSON.stringify(next)), revision);
      return { before, after: next, revision: r, changed: true };
    } catch (err) {
      if (!isKvConflict(err)) throw err;
      if (options.expectedRevision !== undefined) {
        throw new ParleyError('CONFLICT', `task ${id} changed meanwhile`, { details: { revision } });
      }
    }
  }
  throw new ParleyError('UNAVAILABLE', `too much contention on task ${id}; retry`, { retryAfterMs: 100 });
}
