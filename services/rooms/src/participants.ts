import type { JetStreamManager } from '@nats-io/jetstream';
import { inboxStream, isParticipantId, ParleyError } from '@parley/contracts';
import { isConsumerNotFound } from '@parley/kit';

/**
 * Whether a participant exists. Every registered human and agent has an inbox consumer (created by
 * the registry at registration, deleted at deregistration), and a participant without one could not
 * receive anything anyway: so the consumer is the test, and the rooms service needs no registry call.
 */
export function createParticipantDirectory(jsm: JetStreamManager) {
  const known = new Set<string>();
  return {
    /** Throws NOT_FOUND unless `id` is a registered participant. */
    async require(id: string): Promise<void> {
      if (known.has(id)) return;
      if (!isParticipantId(id)) throw new ParleyError('INVALID_ARGUMENT', `${id} is not a participant id`);
      try {
        await jsm.consumers.info(inboxStream(id), id);
        known.add(id);
      } catch (err) {
        if (isConsumerNotFound(err)) {
          throw new ParleyError('NOT_FOUND', `participant ${id} does not exist`, {
            details: { participant: id },
          });
        }
        // The server not answering in time or busy (a JetStream API timeout, thousands of
        // consumers being created at once): retryable, and nothing was changed — not INTERNAL.
        throw new ParleyError(
          'UNAVAILABLE',
          `whether ${id} is registered could not be read now (${(err as Error).message}); nothing was changed: try again`,
          { cause: err, retryAfterMs: 1_000, details: { participant: id } },
        );
      }
    },
    /** Drops a participant from the cache (deregistered). */
    forget(id: string): void {
      known.delete(id);
    },
  };
}

export type ParticipantDirectory = ReturnType<typeof createParticipantDirectory>;
