/**
 * A paused room (runaway detector, a budget, or a person) refuses agents' sends with ROOM_PAUSED
 * until a human resumes it; humans keep talking (one of them is who resumes it). The ingress's room
 * view is the KV-watched control view, so a pause reaches every replica within its watch delay.
 */
import { ParleyError } from '@parley/contracts';
import type { ParleyMetrics } from '@parley/kit';
import type { SendGuard } from '../ingress.js';

/** The paused-room guard. */
export function roomPausedGuard(o: { metrics?: ParleyMetrics | undefined } = {}): SendGuard {
  return {
    name: 'room-paused',
    admit({ sender, room }) {
      if (!room.paused || !sender.startsWith('agt_')) return undefined;
      o.metrics?.recordDenial('ROOM_PAUSED');
      throw new ParleyError(
        'ROOM_PAUSED',
        `room ${room.id} is paused for agents${room.pausedReason ? ` (${room.pausedReason})` : ''}: a human member can resume it`,
        { details: { room: room.id } },
      );
    },
  };
}
