/** Pieces the pages share: a message as it is shown (text, handoff card, data, files; untrusted marked), errors as notices. */
import type { ComponentChildren } from 'preact';
import { ApiError, type Entry, HANDOFF_MEDIA_TYPE, type Handoff, type Part } from '../api';
import { nameOf, notify } from '../state';

/** Runs an action, showing its error (with the gateway's code) or `ok` as a notice. */
export async function act(fn: () => Promise<unknown>, ok?: string): Promise<boolean> {
  try {
    await fn();
    if (ok) notify('ok', ok);
    return true;
  } catch (err) {
    notify('error', err instanceof ApiError ? `${err.code}: ${err.message}` : String(err));
    return false;
  }
}

function List({ title, items }: { title: string; items: string[] }) {
  if (!items.length) return null;
  return (
    <div>
      <h3>{title}</h3>
      <ul>
        {items.map((i) => (
          <li key={i}>{i}</li>
        ))}
      </ul>
    </div>
  );
}

/** A structured handoff as a card: goal, done, tried and ruled out, open questions, artifacts. */
export function HandoffCard({ h }: { h: Handoff }) {
  return (
    <section class="handoff" aria-label="Handoff">
      <h2>
        <span class="tag">handoff</span> {h.goal}
      </h2>
      <List title="Done" items={h.done ?? []} />
      <List title="Tried and ruled out" items={h.triedAndRuledOut ?? []} />
      <List title="Open questions" items={h.openQuestions ?? []} />
      <List title="Artifacts" items={h.artifacts ?? []} />
    </section>
  );
}

function PartView({ p }: { p: Part }) {
  if (p.type === 'text') return <p class="text">{p.text}</p>;
  if (p.type === 'data' && p.mediaType === HANDOFF_MEDIA_TYPE) return <HandoffCard h={p.data as Handoff} />;
  if (p.type === 'data') return <pre class="data">{JSON.stringify(p.data, null, 2)}</pre>;
  return (
    <p class="file">
      📎 {p.url ? <a href={p.url}>{p.name}</a> : p.name}
      {p.mediaType ? ` (${p.mediaType})` : ''}
    </p>
  );
}

/** A membership or room change in words, from its data part (who joined, who paused the room…). */
function systemLine(kind: string, parts: Part[]): string {
  const d = parts.find((p) => p.type === 'data')?.data as
    | { change?: string; member?: string; by?: string; role?: string; reason?: string }
    | undefined;
  if (!d?.change) return `${kind} change`;
  const by = d.by ? nameOf(d.by) : 'someone';
  if (kind === 'membership' && d.member) {
    const who = nameOf(d.member);
    if (d.change === 'joined')
      return d.by && d.by !== d.member ? `${by} added ${who} (${d.role})` : `${who} joined`;
    if (d.change === 'removed') return `${by} removed ${who}`;
    return d.change === 'left' ? `${who} left` : `${who}: membership updated`;
  }
  return `Room ${d.change} by ${by}${d.reason ? `: ${d.reason}` : ''}`;
}

/** One message of a room, as a list item. */
export function MessageView({
  e,
  me,
  onReply,
  jaeger,
}: {
  e: Entry;
  me: string;
  onReply?: (id: string) => void;
  jaeger?: string | undefined;
}) {
  const m = e.message;
  const untrusted = m.provenance?.trust === 'external';
  const trace = m.trace?.traceparent.split('-')[1];
  if (m.kind === 'membership' || m.kind === 'room') {
    const t = m.parts.find((p) => p.type === 'text');
    return (
      <li class="msg msg-system" data-seq={e.seq}>
        {t && 'text' in t ? t.text : systemLine(m.kind, m.parts)}
      </li>
    );
  }
  return (
    <li
      class={`msg${untrusted ? ' msg-untrusted' : ''}${m.sender.id === me ? ' msg-mine' : ''}${m.mentions.includes(me) ? ' msg-mention' : ''}`}
      data-seq={e.seq}
      data-id={m.id}
    >
      <div class="meta">
        <strong title={m.sender.id}>{m.sender.name ?? nameOf(m.sender.id)}</strong>
        <span class="kind">{m.sender.kind}</span>
        {m.kind !== 'message' ? <span class="tag">{m.kind}</span> : null}
        <time dateTime={m.sentAt}>{new Date(m.sentAt).toLocaleTimeString()}</time>
        {m.mentions.includes(me) ? <span class="tag tag-mention">mentions you</span> : null}
        {m.replyTo ? <span class="tag">reply to {m.replyTo.slice(-6)}</span> : null}
      </div>
      {untrusted ? (
        <p class="untrusted" role="note">
          ⚠ Untrusted content from outside ({m.provenance?.source}
          {m.provenance?.note ? `: ${m.provenance.note}` : ''}) — read as data, not as instructions.
        </p>
      ) : null}
      {m.parts.map((p, i) => (
        <PartView key={i} p={p} />
      ))}
      <div class="actions">
        {onReply ? (
          <button type="button" class="link" onClick={() => onReply(m.id)}>
            Reply
          </button>
        ) : null}
        <a href={`#/audit/${m.id}`}>Audit chain</a>
        {jaeger && trace ? (
          <a href={`${jaeger}/trace/${trace}`} target="_blank" rel="noreferrer">
            Trace in Jaeger
          </a>
        ) : null}
      </div>
    </li>
  );
}

/** A table that scrolls sideways on a narrow screen: a labelled region reachable by keyboard (axe scrollable-region-focusable). */
export function TableWrap({ label, children }: { label: string; children: ComponentChildren }) {
  return (
    // biome-ignore lint/a11y/noNoninteractiveTabindex: a scrolling region must be reachable by keyboard to scroll it
    <section class="table-wrap" aria-label={label} tabIndex={0}>
      {children}
    </section>
  );
}
