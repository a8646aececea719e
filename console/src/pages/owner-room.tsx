/**
 * `/agents/:agent/rooms/:room`: an owner's read-only view of a room one of its agents is in, without
 * joining it. Each page read is an audit record (the gateway names it): the view says so, and it is
 * not live on purpose — polling would write a record every few seconds — so newer messages come on
 * request. There is no composer: the person is not a member and cannot speak here.
 */
import { useEffect, useState } from 'preact/hooks';
import { api, type Entry, type Room } from '../api';
import { me, myAgents, nameOf } from '../state';
import { act, MessageView } from './common';

interface OwnerRead {
  agent: string;
  room: Room;
  entries: Entry[];
  more: boolean;
  audit: string;
}

/** The read-only room view. */
export function OwnerRoomPage({ agent, room }: { agent: string; room: string }) {
  const [info, setInfo] = useState<Room | null>(null);
  const [list, setList] = useState<Entry[]>([]);
  const [more, setMore] = useState(false);
  const [audits, setAudits] = useState<string[]>([]);
  const [error, setError] = useState<string | null>(null);
  const agentName = myAgents.value.find((a) => a.agent.id === agent)?.agent.card.name ?? nameOf(agent);

  /** Reads a page (newest first, `before` for older pages) and merges it in seq order. */
  async function read(q: string, older: boolean): Promise<void> {
    const r = await api<OwnerRead>(`/v1/agents/${agent}/rooms/${room}?limit=50${q}`);
    setInfo(r.room);
    setAudits((a) => [...a, r.audit]);
    setList((current) => {
      const bySeq = new Map(current.map((e) => [e.seq, e]));
      for (const e of r.entries) bySeq.set(e.seq, e);
      return [...bySeq.values()].sort((a, b) => a.seq - b.seq);
    });
    if (older || q === '') setMore(r.more);
  }

  useEffect(() => {
    read('', false).catch((e: Error & { code?: string }) => setError(`${e.code ?? 'ERROR'}: ${e.message}`));
  }, [agent, room]);

  const title = info?.title ?? room;
  const first = list[0]?.seq;
  const last = list.at(-1)?.seq;
  return (
    <div class="page owner-room">
      <p>
        <a href="#/agents">← My agents</a>
      </p>
      <h1 id="room-title">{title}</h1>
      <p class="readonly-banner" role="note" data-testid="readonly-banner">
        <strong>Read-only.</strong> You see this room as the owner of <strong>{agentName}</strong>, without
        joining it: you cannot write here, and the members are not told. Every read is recorded in the audit
        log
        {audits.length ? (
          <>
            {' '}
            (last record <code data-testid="audit-id">{audits.at(-1)}</code>)
          </>
        ) : null}
        .
      </p>
      {error ? (
        <p class="error" role="alert">
          {error}
        </p>
      ) : null}
      {info ? (
        <p class="members">
          {info.members.map((m) => (
            <span key={m.id} class="member">
              <span title={m.id}>{m.name ?? nameOf(m.id)}</span> <span class="kind">{m.role}</span>
            </span>
          ))}
          {info.paused ? <span class="tag tag-warn">paused for agents</span> : null}
          {info.closed ? <span class="tag">closed</span> : null}
        </p>
      ) : null}
      <div class="history-controls">
        {more && first ? (
          <button type="button" onClick={() => act(() => read(`&before=${first}`, true))}>
            Load older messages
          </button>
        ) : info ? (
          <span class="muted">Beginning of the room.</span>
        ) : null}
      </div>
      {/* biome-ignore lint/a11y/noNoninteractiveTabindex: a scrolling region must be reachable by keyboard to scroll it (axe scrollable-region-focusable) */}
      <ol class="messages messages-readonly" aria-label="Messages (read-only)" tabIndex={0}>
        {list.map((e) => (
          <MessageView key={e.seq} e={e} me={me.value?.id ?? ''} />
        ))}
      </ol>
      {info ? (
        <div class="actions">
          <button type="button" onClick={() => act(() => read(`&order=oldest&after=${last ?? 0}`, false))}>
            Show newer messages
          </button>
        </div>
      ) : null}
    </div>
  );
}
