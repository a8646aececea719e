/** Audit: a message's or tool call's chain back to the human who started it, hop by hop (who acted, on whose behalf, what was decided). */
import { useEffect, useState } from 'preact/hooks';
import { ApiError, type AuditHop, api } from '../api';

interface Chain {
  hops: AuditHop[];
  origin?: string;
  complete: boolean;
}

/** `/audit/:of?`. */
export function AuditPage({ of }: { of?: string | undefined }) {
  const [id, setId] = useState(of ?? '');
  const [chain, setChain] = useState<Chain | null>(null);
  const [error, setError] = useState<string | null>(null);
  const look = async (what: string) => {
    setError(null);
    setChain(null);
    try {
      setChain(await api<Chain>(`/v1/audit/chain/${encodeURIComponent(what)}`));
    } catch (e) {
      setError(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e));
    }
  };
  useEffect(() => {
    if (of) {
      setId(of);
      void look(of);
    }
  }, [of]);
  return (
    <div class="page">
      <h1>Audit</h1>
      <form
        class="inline"
        onSubmit={(e) => {
          e.preventDefault();
          location.hash = `#/audit/${id.trim()}`;
        }}
      >
        <label for="audit-of">Message or tool call id</label>
        <input
          id="audit-of"
          value={id}
          onInput={(e) => setId(e.currentTarget.value)}
          placeholder="msg_… or tc_…"
          required
        />
        <button type="submit">Show chain</button>
      </form>
      {error ? <p role="alert">{error}</p> : null}
      {chain ? (
        <section aria-label="Chain">
          <p data-testid="audit-origin">
            Started by <strong>{chain.origin ?? 'unknown'}</strong>
            {chain.complete ? '' : ' (incomplete: a hop is past retention)'}
          </p>
          <ol class="chain">
            {chain.hops.map((h) => (
              <li key={h.id}>
                <span class="tag">{h.kind.replace('_', ' ')}</span> <code>{h.id}</code> by{' '}
                <strong>{h.actor}</strong>
                {h.onBehalfOf.length ? ` on behalf of ${h.onBehalfOf.join(' → ')}` : ''}
                {h.tool ? ` · tool ${h.tool}` : ''}
                {h.decision ? ` · ${h.decision}` : ''}
                {h.status ? ` · ${h.status}` : ''}
                {h.room ? (
                  <>
                    {' '}
                    in <a href={`#/rooms/${h.room}`}>{h.room}</a>
                  </>
                ) : null}
              </li>
            ))}
          </ol>
        </section>
      ) : null}
    </div>
  );
}
