/** The consent inbox: requests to this person and their agents (reason, requester's card), accept / reject / block; outgoing and their state; contacts. */
import { useEffect, useState } from 'preact/hooks';
import { type AgentListing, api, type ContactRequest } from '../api';
import { nameOf, notify } from '../state';
import { act } from './common';

interface Pending {
  incoming: ContactRequest[];
  outgoing: ContactRequest[];
}

function Requester({ id }: { id: string }) {
  const [card, setCard] = useState<AgentListing | null>(null);
  useEffect(() => {
    if (id.startsWith('agt_'))
      void api<AgentListing>(`/v1/agents/${id}`)
        .then(setCard)
        .catch(() => undefined);
  }, [id]);
  if (!card) return <code>{id}</code>;
  const c = card.agent.card;
  return (
    <div class="card-mini">
      <strong>{c.name}</strong> <code>{id}</code> <span class="kind">{c.runtime}</span>
      {c.description ? <p>{c.description}</p> : null}
      {c.skills.length ? <p class="muted">Skills: {c.skills.map((s) => s.name).join(', ')}</p> : null}
    </div>
  );
}

/** `/inbox`. */
export function InboxPage() {
  const [p, setP] = useState<Pending | null>(null);
  const [to, setTo] = useState('');
  const [reason, setReason] = useState('');
  const load = () =>
    api<Pending>('/v1/contacts/requests')
      .then(setP)
      .catch((e: Error) => notify('error', e.message));
  useEffect(() => {
    void load();
    const t = setInterval(load, 5000);
    return () => clearInterval(t);
  }, []);
  const answer = async (id: string, a: 'accept' | 'reject' | 'block') => {
    await act(() => api(`/v1/contacts/requests/${id}/answer`, { body: { answer: a } }), `Request ${a}ed`);
    await load();
  };
  return (
    <div class="page">
      <h1>Consent inbox</h1>
      <h2>Incoming ({p?.incoming.length ?? 0})</h2>
      {p && p.incoming.length === 0 ? <p>No request is waiting.</p> : null}
      <ul class="requests">
        {p?.incoming.map((r) => (
          <li key={r.id} class="request" data-testid="incoming-request">
            <Requester id={r.from} />
            <p>
              wants contact with <strong>{nameOf(r.to)}</strong>
            </p>
            <p class="untrusted-reason">
              <span class="tag">reason, written by the requester</span> {r.reason}
            </p>
            <div class="actions">
              <button type="button" onClick={() => answer(r.id, 'accept')}>
                Accept
              </button>
              <button type="button" onClick={() => answer(r.id, 'reject')}>
                Reject
              </button>
              <button type="button" class="danger" onClick={() => answer(r.id, 'block')}>
                Block
              </button>
            </div>
          </li>
        ))}
      </ul>
      <h2>Outgoing ({p?.outgoing.length ?? 0})</h2>
      <ul>
        {p?.outgoing.map((r) => (
          <li key={r.id}>
            to <strong>{nameOf(r.to)}</strong> <code>{r.to}</code> — {r.state}, expires{' '}
            {new Date(r.expiresAt).toLocaleDateString()}
          </li>
        ))}
      </ul>
      <form
        class="inline"
        onSubmit={async (e) => {
          e.preventDefault();
          if (await act(() => api('/v1/contacts/requests', { body: { to, reason } }), 'Request sent')) {
            setTo('');
            setReason('');
            await load();
          }
        }}
      >
        <h2>Ask for contact</h2>
        <label for="req-to">Participant id</label>
        <input id="req-to" value={to} onInput={(e) => setTo(e.currentTarget.value)} required />
        <label for="req-reason">Reason</label>
        <input id="req-reason" value={reason} onInput={(e) => setReason(e.currentTarget.value)} required />
        <button type="submit">Send request</button>
      </form>
    </div>
  );
}
