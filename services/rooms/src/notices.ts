/**
 * Private notices from Parley to a participant (an agent was suspended, a budget was crossed…),
 * delivered like any message: each participant has a "Parley notices" room of its own, created on
 * first use and remembered in `notices.<participantId>` (parley_rooms), and a notice is a `system`
 * entry of that room addressed to it alone. Services send them with `rooms.notify`.
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { type ApiParsedRequest, isParleyError, partitionOf, type roomsApi } from '@parley/contracts';
import type { ControlPlane } from './control.js';
import { appendEntry, systemEntry } from './room-log.js';
import { createEntry, readEntry } from './room-store.js';

const key = (participant: string) => `notices.${participant}`;

/** Builds `notify`. */
export function createNotices(deps: {
  js: JetStreamClient;
  kv: KV;
  control: ControlPlane;
  partitions: number;
}) {
  async function noticeRoom(participant: string): Promise<string> {
    const known = await readEntry<{ room: string }>(deps.kv, key(participant));
    if (known) return known.value.room;
    const room = await deps.control.create(
      {
        title: 'Parley notices',
        members: [],
        direct: false,
        policy: { whoMayInvite: 'owner', onContactRevoked: 'stay', history: 'shared' },
      },
      participant,
    );
    try {
      await createEntry(deps.kv, key(participant), { room: room.id });
      return room.id;
    } catch (err) {
      if (!isParleyError(err, 'CONFLICT')) throw err;
      // Another replica created one at the same moment: use theirs, close ours.
      await deps.control.close({ room: room.id }, participant).catch(() => undefined);
      const other = await readEntry<{ room: string }>(deps.kv, key(participant));
      if (!other) throw err;
      return other.value.room;
    }
  }

  return {
    async notify(
      req: ApiParsedRequest<typeof roomsApi.notify>,
      caller: string,
    ): Promise<{ room: string; seq: number }> {
      const room = await noticeRoom(req.participant);
      const notice = systemEntry(
        room,
        caller,
        'system',
        { event: 'notice', ...req.data },
        {
          mentions: [req.participant],
          audience: 'mentions',
        },
      );
      notice.parts.unshift({ type: 'text', text: req.text });
      const { seq } = await appendEntry(
        deps.js,
        { id: room, partition: partitionOf(room, deps.partitions) },
        notice,
        req.id ? `notice:${req.participant}:${req.id}` : notice.id,
      );
      return { room, seq };
    },
  };
}
