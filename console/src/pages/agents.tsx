/** My agents: inventory with presence and activity, cards, scopes, tools, the rooms each is in (opened read-only, audited); suspend/resume (kill switch), rotate/revoke credentials, create an agent, connect instructions. */
import { useEffect, useState } from 'preact/hooks';
import { type AgentListing, api, type Room, type RoomSummary } from '../api';
import { loadAgents, me, myAgents, rooms } from '../state';
import { act } from './common';

/** Offers `text` as a file download (credentials are shown once: this is the once). */
function download(name: string, text: string): void {
  const url = URL.createObjectURL(new Blob([text], { type: 'text/plain' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

function AgentRow({ a, shared }: { a: AgentListing; shared: Room[] }) {
  const [reason, setReason] = useState('');
  const id = a.agent.id;
  const c = a.agent.card;
  const suspended = a.agent.status === 'suspended';
  const need = (what: string) => reason.trim() || `${what} from the console by ${me.value?.id}`;
  // Every room the agent is in (the owner's view, from the rooms service), not only the shared ones.
  const [inRooms, setInRooms] = useState<RoomSummary[] | null>(null);
  const [roomsError, setRoomsError] = useState<string | null>(null);
  useEffect(() => {
    api<{ rooms: RoomSummary[] }>(`/v1/agents/${id}/rooms?limit=100`)
      .then((r) => setInRooms(r.rooms))
      .catch((e: Error & { code?: string }) => setRoomsError(`${e.code ?? 'ERROR'}: ${e.message}`));
  }, [id]);
  return (
    <li class="agent" data-testid="agent" data-agent={id}>
      <header>
        <h2>{c.name}</h2>
        <span class={`presence presence-${a.presence.state}`}>{a.presence.state.replace('_', ' ')}</span>
        <span
          class={`tag${suspended || a.agent.status === 'revoked' ? ' tag-warn' : ''}`}
          data-testid="status"
        >
          {a.agent.status}
        </span>
      </header>
      <p class="muted">
        <code>{id}</code> · {c.runtime}
        {a.presence.activity ? ` · ${a.presence.activity}` : ''}
      </p>
      {c.description ? <p>{c.description}</p> : null}
      <dl class="facts">
        <dt>Skills</dt>
        <dd>{c.skills.map((s) => s.name).join(', ') || '—'}</dd>
        <dt>Tools</dt>
        <dd>{c.tools?.join(', ') || '—'}</dd>
        <dt>Scopes</dt>
        <dd>{c.scopes?.join(', ') || '—'}</dd>
        <dt>Rooms it is in</dt>
        <dd data-testid="agent-rooms">
          {roomsError ? (
            <span class="error" role="alert">
              {roomsError}
            </span>
          ) : inRooms === null ? (
            'loading…'
          ) : inRooms.length ? (
            <ul class="plain">
              {inRooms.map((r) => (
                <li key={r.id}>
                  <a href={`#/agents/${id}/rooms/${r.id}`}>{r.title}</a>{' '}
                  <span class="muted">
                    ({r.role}, {r.memberCount} members, read-only)
                  </span>
                  {shared.some((x) => x.id === r.id) ? (
                    <>
                      {' · '}
                      <a href={`#/rooms/${r.id}`} aria-label={`${r.title}: open as a member`}>
                        open as a member
                      </a>
                    </>
                  ) : null}
                </li>
              ))}
            </ul>
          ) : (
            '—'
          )}
        </dd>
      </dl>
      <div class="inline">
        <label for={`reason-${id}`}>Reason</label>
        <input id={`reason-${id}`} value={reason} onInput={(e) => setReason(e.currentTarget.value)} />
      </div>
      <div class="actions">
        {suspended ? (
          <button
            type="button"
            onClick={async () => {
              await act(
                () => api(`/v1/agents/${id}/resume`, { body: { reason: need('resumed') } }),
                `${c.name} resumed`,
              );
              await loadAgents();
            }}
          >
            Resume
          </button>
        ) : (
          <button
            type="button"
            class="danger"
            onClick={async () => {
              await act(
                () => api(`/v1/agents/${id}/suspend`, { body: { reason: need('suspended') } }),
                `${c.name} suspended`,
              );
              await loadAgents();
            }}
          >
            Suspend
          </button>
        )}
        <button
          type="button"
          onClick={() =>
            act(async () => {
              const r = await api<{ creds: string }>(`/v1/agents/${id}/credentials/rotate`, {
                method: 'POST',
                body: {},
              });
              download(`${id}.creds`, r.creds);
            }, 'New credentials downloaded; the old ones stopped working')
          }
        >
          Rotate credentials
        </button>
        <button
          type="button"
          class="danger"
          onClick={async () => {
            if (!confirm(`Revoke every credential of ${c.name} for good?`)) return;
            await act(
              () => api(`/v1/agents/${id}/credentials/revoke`, { body: { reason: need('revoked') } }),
              `${c.name} revoked`,
            );
            await loadAgents();
          }}
        >
          Revoke
        </button>
      </div>
    </li>
  );
}

function CreateAgent() {
  const [name, setName] = useState('');
  const [description, setDescription] = useState('');
  const [runtime, setRuntime] = useState('custom');
  return (
    <form
      class="inline"
      onSubmit={async (e) => {
        e.preventDefault();
        const ok = await act(async () => {
          const r = await api<{ agent: { id: string }; credentials: { creds: string } }>('/v1/agents', {
            body: { card: { name, description, runtime } },
          });
          download(`${r.agent.id}.creds`, r.credentials.creds);
        }, `Agent ${name} created; its credentials were downloaded (shown once)`);
        if (ok) {
          setName('');
          setDescription('');
          await loadAgents();
        }
      }}
    >
      <h2>Create an agent</h2>
      <label for="agent-name">Name</label>
      <input id="agent-name" value={name} onInput={(e) => setName(e.currentTarget.value)} required />
      <label for="agent-desc">Description</label>
      <input id="agent-desc" value={description} onInput={(e) => setDescription(e.currentTarget.value)} />
      <label for="agent-runtime">Runtime</label>
      <select id="agent-runtime" value={runtime} onChange={(e) => setRuntime(e.currentTarget.value)}>
        {['custom', 'claude-code', 'codex', 'cursor', 'langgraph', 'bridge'].map((r) => (
          <option key={r} value={r}>
            {r}
          </option>
        ))}
      </select>
      <button type="submit">Create and download credentials</button>
    </form>
  );
}

/** `/agents`. */
export function AgentsPage() {
  // The rooms an agent is in, as far as the person can see them: their own rooms it is a member of
  // (the rooms service shows a room's members to its members only).
  const [details, setDetails] = useState<Room[]>([]);
  useEffect(() => {
    void Promise.all(rooms.value.map((r) => api<Room>(`/v1/rooms/${r.id}`).catch(() => null))).then((l) =>
      setDetails(l.filter((r): r is Room => r !== null)),
    );
  }, [rooms.value]);
  const owner = me.value?.id ?? 'usr_…';
  const server = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.hostname}:<NATS WebSocket port>`;
  return (
    <div class="page">
      <h1>My agents ({myAgents.value.length})</h1>
      <ul class="agents">
        {myAgents.value.map((a) => (
          <AgentRow
            key={a.agent.id}
            a={a}
            shared={details.filter((r) => r.members.some((m) => m.id === a.agent.id))}
          />
        ))}
      </ul>
      <CreateAgent />
      <section aria-labelledby="connect-h">
        <h2 id="connect-h">Connect a coding session</h2>
        <p>
          Run this in the project directory; it creates (or reuses) the agent, writes its creds and the
          client’s MCP configuration:
        </p>
        <pre>
          <code>{`npx parley connect claude-code --name coder --owner ${owner}     # writes ./.mcp.json
npx parley connect codex --name reviewer --owner ${owner}      # writes ~/.codex/config.toml
npx parley connect cursor --name pair --owner ${owner}         # writes ./.cursor/mcp.json`}</code>
        </pre>
        <p class="muted">
          From another machine, add <code>--server {server}</code> (the gateway’s NATS WebSocket listener).
        </p>
      </section>
    </div>
  );
}
