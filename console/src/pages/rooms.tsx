/** Rooms, live: the list with unread counts, a room's conversation as it happens, send and reply, invite, leave, pause/resume, history paging. */
import { useEffect, useRef, useState } from 'preact/hooks';
import { Link } from 'wouter-preact';
import { api, type Room } from '../api';
import {
  catchUp,
  enterRoom,
  entries,
  loadHistory,
  loadRooms,
  markAnswered,
  me,
  more,
  nameOf,
  openRoom,
  rooms,
  siteConfig,
  unread,
} from '../state';
import { act, MessageView } from './common';

function RoomList({ current }: { current?: string }) {
  return (
    <nav aria-label="Rooms" class="roomlist">
      <ul>
        {rooms.value.map((r) => (
          <li key={r.id}>
            <Link href={`/rooms/${r.id}`} aria-current={r.id === current ? 'page' : undefined}>
              <span class="title">{r.title}</span>
              <span class="sub">
                {r.memberCount} members{r.direct ? ' · direct' : ''}
              </span>
              {unread.value[r.id] ? (
                <span class="badge">
                  {unread.value[r.id]}
                  <span class="sr-only"> unread</span>
                </span>
              ) : null}
            </Link>
          </li>
        ))}
      </ul>
    </nav>
  );
}

/** `/`: the rooms and a form to start one. */
export function RoomsPage() {
  const [title, setTitle] = useState('');
  const [members, setMembers] = useState('');
  useEffect(() => {
    openRoom.value = null;
  }, []);
  return (
    <div class="page">
      <h1>Rooms</h1>
      {rooms.value.length === 0 ? <p>You are in no room yet.</p> : <RoomList />}
      <form
        class="inline"
        onSubmit={async (e) => {
          e.preventDefault();
          const list = members
            .split(/[\s,]+/)
            .map((m) => m.trim())
            .filter(Boolean);
          if (
            await act(
              () => api('/v1/rooms', { body: { title, ...(list.length ? { members: list } : {}) } }),
              `Room “${title}” created`,
            )
          ) {
            setTitle('');
            setMembers('');
            await loadRooms();
          }
        }}
      >
        <h2>New room</h2>
        <label for="new-title">Title</label>
        <input id="new-title" value={title} onInput={(e) => setTitle(e.currentTarget.value)} required />
        <label for="new-members">Members (ids, comma-separated)</label>
        <input id="new-members" value={members} onInput={(e) => setMembers(e.currentTarget.value)} />
        <button type="submit">Create room</button>
      </form>
    </div>
  );
}

/** `/rooms/:room`: one room, live. */
export function RoomPage({ room }: { room: string }) {
  const [info, setInfo] = useState<Room | null>(null);
  const [text, setText] = useState('');
  const [replyTo, setReplyTo] = useState<string | null>(null);
  const [invitee, setInvitee] = useState('');
  const [reason, setReason] = useState('');
  const listRef = useRef<HTMLOListElement>(null);
  const who = me.value?.id ?? '';
  const list = entries.value[room] ?? [];
  const refresh = () =>
    api<Room>(`/v1/rooms/${room}`)
      .then(setInfo)
      .catch(() => setInfo(null));
  useEffect(() => {
    void enterRoom(room).catch(() => undefined);
    void refresh();
    return () => {
      if (openRoom.value === room) openRoom.value = null;
    };
  }, [room]);
  // A frame for the open room is read on arrival.
  useEffect(() => {
    if (unread.value[room]) unread.value = { ...unread.value, [room]: 0 };
    const el = listRef.current;
    if (el) el.scrollTop = el.scrollHeight;
  }, [list.length]);
  const title = info?.title ?? rooms.value.find((r) => r.id === room)?.title ?? room;
  return (
    <div class="room-layout">
      <aside class="side">
        <RoomList current={room} />
      </aside>
      <section class="room" aria-labelledby="room-title">
        <header class="room-head">
          <h1 id="room-title">{title}</h1>
          {info?.paused ? <span class="tag tag-warn">paused for agents</span> : null}
          <p class="members">
            {info?.members.map((m) => (
              <span key={m.id} class="member">
                <span title={m.id}>{m.name ?? nameOf(m.id)}</span> <span class="kind">{m.role}</span>
              </span>
            ))}
          </p>
        </header>
        <div class="history-controls">
          {more.value[room] ? (
            <button type="button" onClick={() => act(() => loadHistory(room, true))}>
              Load older messages
            </button>
          ) : (
            <span class="muted">Beginning of the room.</span>
          )}
        </div>
        {/* biome-ignore lint/a11y/noNoninteractiveTabindex: a scrolling region must be reachable by keyboard to scroll it (axe scrollable-region-focusable) */}
        <ol class="messages" ref={listRef} aria-label="Messages" aria-live="polite" tabIndex={0}>
          {list.map((e) => (
            <MessageView
              key={e.seq}
              e={e}
              me={who}
              onReply={setReplyTo}
              jaeger={siteConfig.value.jaegerUrl}
            />
          ))}
        </ol>
        <form
          class="composer"
          onSubmit={async (e) => {
            e.preventDefault();
            const body = { text, ...(replyTo ? { replyTo } : {}) };
            if (await act(() => api(`/v1/rooms/${room}/messages`, { body }))) {
              if (replyTo) markAnswered(replyTo);
              setText('');
              setReplyTo(null);
              await catchUp(room);
            }
          }}
        >
          {replyTo ? (
            <p class="replying">
              Replying to {replyTo}{' '}
              <button type="button" class="link" onClick={() => setReplyTo(null)}>
                cancel
              </button>
            </p>
          ) : null}
          <label for="composer-text">Message</label>
          <textarea
            id="composer-text"
            rows={2}
            value={text}
            onInput={(e) => setText(e.currentTarget.value)}
            onKeyDown={(e) => {
              if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) e.currentTarget.form?.requestSubmit();
            }}
            required
          />
          <button type="submit">Send</button>
        </form>
        <details class="room-admin">
          <summary>Members and controls</summary>
          <form
            class="inline"
            onSubmit={async (e) => {
              e.preventDefault();
              if (
                await act(
                  () => api(`/v1/rooms/${room}/members`, { body: { participant: invitee.trim() } }),
                  `Invited ${invitee}`,
                )
              ) {
                setInvitee('');
                await refresh();
              }
            }}
          >
            <label for="invitee">Invite (participant id)</label>
            <input id="invitee" value={invitee} onInput={(e) => setInvitee(e.currentTarget.value)} required />
            <button type="submit">Invite</button>
          </form>
          <div class="inline">
            <label for="pause-reason">Reason</label>
            <input id="pause-reason" value={reason} onInput={(e) => setReason(e.currentTarget.value)} />
          </div>
          <div class="actions">
            {info?.paused ? (
              <button
                type="button"
                onClick={async () => {
                  await act(
                    () => api(`/v1/rooms/${room}/resume`, { body: reason ? { reason } : {} }),
                    'Room resumed',
                  );
                  await refresh();
                }}
              >
                Resume room
              </button>
            ) : (
              <button
                type="button"
                class="danger"
                onClick={async () => {
                  await act(
                    () => api(`/v1/rooms/${room}/pause`, { body: reason ? { reason } : {} }),
                    'Room paused for agents',
                  );
                  await refresh();
                }}
              >
                Pause room
              </button>
            )}
            <button
              type="button"
              onClick={async () => {
                if (
                  await act(
                    () => api(`/v1/rooms/${room}/leave`, { method: 'POST', body: {} }),
                    'Left the room',
                  )
                ) {
                  await loadRooms();
                  location.hash = '#/';
                }
              }}
            >
              Leave room
            </button>
          </div>
        </details>
      </section>
    </div>
  );
}
