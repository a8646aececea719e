/**
 * Pieces of the rooms service for sibling packages (benchmarks, tests): the send guards, built
 * the way the service builds them, and the checks `rooms.create` makes. Not a public surface.
 */

export { CONSENT_CHECK_TRIES, createConsentGate } from './consent.js';
export { logEntryAt, partitionConsumer } from './fanout.js';
export { delegationGuard } from './guards/delegation.js';
export { rateLimitGuard } from './guards/rate-limit.js';
export { roomPausedGuard } from './guards/room-paused.js';
export { TokenBuckets } from './guards/token-bucket.js';
export type { GuardedSend, SendGuard } from './ingress.js';
export { createLeaseManager, firstPartition } from './leases.js';
export { createParticipantDirectory } from './participants.js';
export { createRunawayDetector } from './runaway.js';
