/** Needs input: the questions agents asked this person (ask_human), and their agents that wait; the answer goes back into the room. */
import { useState } from 'preact/hooks';
import { api } from '../api';
import { type Ask, asks, catchUp, markAnswered, nameOf, rooms, waitingAgents } from '../state';
import { act } from './common';

function AskCard({ ask }: { ask: Ask }) {
  const [answer, setAnswer] = useState('');
  const m = ask.entry.message;
  const question = m.parts.map((p) => (p.type === 'text' ? p.text : '')).join('\n');
  const room = rooms.value.find((r) => r.id === ask.room);
  const id = `answer-${m.id}`;
  return (
    <li class="ask" data-testid="ask">
      <p class="meta">
        <strong>{m.sender.name ?? nameOf(m.sender.id)}</strong> asks in{' '}
        <a href={`#/rooms/${ask.room}`}>{room?.title ?? ask.room}</a> ·{' '}
        <time dateTime={m.sentAt}>{new Date(m.sentAt).toLocaleString()}</time>
      </p>
      {m.provenance?.trust === 'external' ? (
        <p class="untrusted" role="note">
          ⚠ Untrusted content from outside ({m.provenance.source})
        </p>
      ) : null}
      <blockquote class="question">{question}</blockquote>
      <form
        onSubmit={async (e) => {
          e.preventDefault();
          if (
            await act(
              () =>
                api(`/v1/rooms/${ask.room}/messages`, {
                  body: { text: answer, replyTo: m.id, mentions: [m.sender.id] },
                }),
              'Answer sent',
            )
          ) {
            markAnswered(m.id);
            await catchUp(ask.room);
          }
        }}
      >
        <label for={id}>Your answer</label>
        <textarea
          id={id}
          rows={2}
          value={answer}
          onInput={(e) => setAnswer(e.currentTarget.value)}
          required
        />
        <button type="submit">Send answer</button>
      </form>
    </li>
  );
}

/** `/asks`. */
export function AsksPage() {
  const [perm, setPerm] = useState(
    typeof Notification === 'undefined' ? 'unsupported' : Notification.permission,
  );
  return (
    <div class="page">
      <h1>Needs input</h1>
      {perm === 'default' ? (
        <p>
          <button type="button" onClick={async () => setPerm(await Notification.requestPermission())}>
            Notify me when this tab is in the background
          </button>
        </p>
      ) : (
        <p class="muted">Background notifications: {perm}.</p>
      )}
      <h2>Open questions ({asks.value.length})</h2>
      {asks.value.length === 0 ? <p>No question is waiting for you.</p> : null}
      <ul class="asks">
        {asks.value.map((a) => (
          <AskCard key={a.entry.message.id} ask={a} />
        ))}
      </ul>
      <h2>Your agents waiting for input ({waitingAgents.value.length})</h2>
      {waitingAgents.value.length === 0 ? <p>None of your agents is waiting.</p> : null}
      <ul>
        {waitingAgents.value.map((a) => (
          <li key={a.agent.id} data-testid="waiting-agent">
            <strong>{a.agent.card.name}</strong> ({a.agent.id}): {a.presence.activity ?? 'needs input'}
          </li>
        ))}
      </ul>
    </div>
  );
}
