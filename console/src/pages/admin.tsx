/**
 * Admins: organisations, people, grants and org policy, budgets of agents and owners, the org's
 * agents, and each agent's API keys and outbound webhook. Everything goes through `/v1`, where the services decide who may (an admin
 * of the org; creating an org is the superadmin's; an agent's keys and webhook its owner's or an
 * admin's). A refusal is shown in the section it happened in, with the gateway's code.
 */
import { useEffect, useState } from 'preact/hooks';
import { type AgentListing, ApiError, api } from '../api';
import { me, nameOf, notify } from '../state';
import { Budgets } from './budgets';
import { TableWrap } from './common';

interface Org {
  id: string;
  name: string;
}
interface Human {
  id: string;
  name: string;
  org: string;
  role: string;
  email?: string;
}
interface Grants {
  participant: string;
  scopes: string[];
  by: string;
  at: string;
}
interface KeyInfo {
  id: string;
  label: string;
  scopes: string[];
  createdAt: string;
  expiresAt?: string;
  revokedAt?: string;
}
interface Webhook {
  info: { url: string; maxAttempts: number; createdAt: string };
  deadLetters: unknown[];
}

const message = (err: unknown) =>
  err instanceof ApiError ? `${err.code}: ${err.message}` : err instanceof Error ? err.message : String(err);

/** One section's error line and a runner that fills or clears it. */
function useSection() {
  const [error, setError] = useState<string | null>(null);
  async function run<T>(fn: () => Promise<T>, ok?: string): Promise<T | undefined> {
    try {
      const r = await fn();
      setError(null);
      if (ok) notify('ok', ok);
      return r;
    } catch (err) {
      setError(message(err));
      return undefined;
    }
  }
  const shown = error ? (
    <p class="section-error" role="alert" data-testid="section-error">
      {error}
    </p>
  ) : null;
  return { run, error: shown };
}

const split = (text: string) =>
  text
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);

/** Offers `text` as a file download (credentials are shown once). */
function download(name: string, text: string): void {
  const url = URL.createObjectURL(new Blob([text], { type: 'text/plain' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

function OrgsSection({ org, setOrg }: { org: string; setOrg: (o: string) => void }) {
  const [orgs, setOrgs] = useState<Org[]>([]);
  const [name, setName] = useState('');
  const s = useSection();
  const load = () => s.run(() => api<{ orgs: Org[] }>('/v1/orgs')).then((r) => r && setOrgs(r.orgs));
  useEffect(() => void load(), []);
  return (
    <section class="admin-section" aria-labelledby="orgs-h">
      <h2 id="orgs-h">Organisations</h2>
      {s.error}
      <div class="inline">
        <label for="org-pick">Organisation</label>
        <select id="org-pick" value={org} onChange={(e) => setOrg(e.currentTarget.value)}>
          {orgs.map((o) => (
            <option key={o.id} value={o.id}>
              {o.name} ({o.id})
            </option>
          ))}
        </select>
      </div>
      {me.value?.superadmin ? (
        <form
          class="inline"
          onSubmit={async (e) => {
            e.preventDefault();
            if (await s.run(() => api('/v1/orgs', { body: { name } }), `Organisation ${name} created`)) {
              setName('');
              await load();
            }
          }}
        >
          <label for="org-name">New organisation</label>
          <input id="org-name" value={name} onInput={(e) => setName(e.currentTarget.value)} required />
          <button type="submit">Create organisation</button>
        </form>
      ) : (
        <p class="muted">Creating organisations is for the superadmin.</p>
      )}
    </section>
  );
}

function PeopleSection({ org, people, reload }: { org: string; people: Human[]; reload: () => void }) {
  const [name, setName] = useState('');
  const [email, setEmail] = useState('');
  const [role, setRole] = useState('member');
  const s = useSection();
  return (
    <section class="admin-section" aria-labelledby="people-h">
      <h2 id="people-h">People ({people.length})</h2>
      {s.error}
      <TableWrap label={`People of ${org}`}>
        <table>
          <caption class="sr-only">People of {org}</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Id</th>
              <th scope="col">Role</th>
              <th scope="col">Email</th>
            </tr>
          </thead>
          <tbody>
            {people.map((p) => (
              <tr key={p.id}>
                <td>{p.name}</td>
                <td>
                  <code>{p.id}</code>
                </td>
                <td>{p.role}</td>
                <td>{p.email ?? '—'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </TableWrap>
      <form
        class="inline"
        onSubmit={async (e) => {
          e.preventDefault();
          const r = await s.run(
            () =>
              api<{ user: Human; credentials: { creds: string } }>('/v1/users', {
                body: { name, org, role, ...(email ? { email } : {}) },
              }),
            `${name} added; their credentials were downloaded (shown once)`,
          );
          if (r) {
            download(`${r.user.id}.creds`, r.credentials.creds);
            setName('');
            setEmail('');
            reload();
          }
        }}
      >
        <h3>Add a person</h3>
        <label for="user-name">Name</label>
        <input id="user-name" value={name} onInput={(e) => setName(e.currentTarget.value)} required />
        <label for="user-email">Email</label>
        <input id="user-email" type="email" value={email} onInput={(e) => setEmail(e.currentTarget.value)} />
        <label for="user-role">Role</label>
        <select id="user-role" value={role} onChange={(e) => setRole(e.currentTarget.value)}>
          <option value="member">member</option>
          <option value="admin">admin</option>
        </select>
        <button type="submit">Add person</button>
      </form>
    </section>
  );
}

function GrantsSection({ org, people }: { org: string; people: Human[] }) {
  const [grants, setGrants] = useState<Grants[]>([]);
  const [policy, setPolicy] = useState<{ grants: string[]; deny: string[] } | null>(null);
  const [user, setUser] = useState('');
  const [scopes, setScopes] = useState('');
  const [orgGrants, setOrgGrants] = useState('');
  const [orgDeny, setOrgDeny] = useState('');
  const s = useSection();
  const load = () =>
    s
      .run(() =>
        api<{ grants: Grants[]; policy?: { grants: string[]; deny: string[] } }>(`/v1/grants?org=${org}`),
      )
      .then((r) => {
        if (!r) return;
        setGrants(r.grants);
        setPolicy(r.policy ?? null);
        setOrgGrants(r.policy?.grants.join(', ') ?? '');
        setOrgDeny(r.policy?.deny.join(', ') ?? '');
      });
  useEffect(() => void load(), [org]);
  return (
    <section class="admin-section" aria-labelledby="grants-h">
      <h2 id="grants-h">Grants</h2>
      {s.error}
      <p>
        Every person of the org holds: <code>{policy?.grants.join(', ') || '—'}</code>. Nobody may use:{' '}
        <code>{policy?.deny.join(', ') || '—'}</code>.
      </p>
      <TableWrap label={`Scopes granted to people`}>
        <table data-testid="grants">
          <caption class="sr-only">Scopes granted to people</caption>
          <thead>
            <tr>
              <th scope="col">Person</th>
              <th scope="col">Scopes</th>
              <th scope="col">Set by</th>
            </tr>
          </thead>
          <tbody>
            {grants.map((g) => (
              <tr key={g.participant}>
                <td>{people.find((p) => p.id === g.participant)?.name ?? g.participant}</td>
                <td>
                  <code>{g.scopes.join(', ') || '—'}</code>
                </td>
                <td>
                  {nameOf(g.by)} <time dateTime={g.at}>{new Date(g.at).toLocaleString()}</time>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </TableWrap>
      <form
        class="inline"
        onSubmit={async (e) => {
          e.preventDefault();
          if (
            await s.run(
              () => api(`/v1/users/${user}/grants`, { method: 'PUT', body: { scopes: split(scopes) } }),
              'Grants set',
            )
          ) {
            setScopes('');
            await load();
          }
        }}
      >
        <h3>Set a person’s scopes</h3>
        <label for="grant-user">Person</label>
        <select id="grant-user" value={user} onChange={(e) => setUser(e.currentTarget.value)} required>
          <option value="">choose…</option>
          {people.map((p) => (
            <option key={p.id} value={p.id}>
              {p.name}
            </option>
          ))}
        </select>
        <label for="grant-scopes">Scopes (comma-separated)</label>
        <input id="grant-scopes" value={scopes} onInput={(e) => setScopes(e.currentTarget.value)} />
        <button type="submit">Set scopes</button>
      </form>
      <form
        class="inline"
        onSubmit={async (e) => {
          e.preventDefault();
          if (
            await s.run(
              () =>
                api(`/v1/orgs/${org}/policy`, {
                  method: 'PUT',
                  body: { grants: split(orgGrants), deny: split(orgDeny) },
                }),
              'Org policy set',
            )
          )
            await load();
        }}
      >
        <h3>Org policy</h3>
        <label for="org-grants">Everyone holds</label>
        <input id="org-grants" value={orgGrants} onInput={(e) => setOrgGrants(e.currentTarget.value)} />
        <label for="org-deny">Nobody may use</label>
        <input id="org-deny" value={orgDeny} onInput={(e) => setOrgDeny(e.currentTarget.value)} />
        <button type="submit">Set org policy</button>
      </form>
    </section>
  );
}

function BudgetSection({ agents, people }: { agents: AgentListing[]; people: Human[] }) {
  const [target, setTarget] = useState('');
  const [tokens, setTokens] = useState('');
  const [cost, setCost] = useState('');
  const [onExceed, setOnExceed] = useState('suspend');
  const [version, setVersion] = useState(0);
  const s = useSection();
  return (
    <div class="admin-section">
      <Budgets version={version} />
      {s.error}
      <form
        class="inline"
        onSubmit={async (e) => {
          e.preventDefault();
          const kind = target.startsWith('agt_') ? 'agent' : 'owner';
          const ok = await s.run(
            () =>
              api('/v1/budgets', {
                method: 'PUT',
                body: {
                  [kind]: target,
                  onExceed,
                  ...(tokens ? { tokensPerDay: Number(tokens) } : {}),
                  ...(cost ? { costUsdPerDay: Number(cost) } : {}),
                },
              }),
            'Budget set',
          );
          if (ok) setVersion((v) => v + 1);
        }}
      >
        <h3>Set a daily budget</h3>
        <label for="ab-target">For</label>
        <select id="ab-target" value={target} onChange={(e) => setTarget(e.currentTarget.value)} required>
          <option value="">choose…</option>
          <optgroup label="An agent">
            {agents.map((a) => (
              <option key={a.agent.id} value={a.agent.id}>
                {a.agent.card.name}
              </option>
            ))}
          </optgroup>
          <optgroup label="An owner (all their agents)">
            {people.map((p) => (
              <option key={p.id} value={p.id}>
                {p.name}
              </option>
            ))}
          </optgroup>
        </select>
        <label for="ab-tokens">Tokens per day</label>
        <input
          id="ab-tokens"
          inputMode="numeric"
          value={tokens}
          onInput={(e) => setTokens(e.currentTarget.value)}
        />
        <label for="ab-cost">USD per day</label>
        <input
          id="ab-cost"
          inputMode="decimal"
          value={cost}
          onInput={(e) => setCost(e.currentTarget.value)}
        />
        <label for="ab-exceed">When crossed</label>
        <select id="ab-exceed" value={onExceed} onChange={(e) => setOnExceed(e.currentTarget.value)}>
          <option value="suspend">suspend the agent(s)</option>
          <option value="pause_room">pause the room</option>
        </select>
        <button type="submit">Set budget</button>
      </form>
    </div>
  );
}

function KeysSection({ agent }: { agent: string }) {
  const [keys, setKeys] = useState<KeyInfo[]>([]);
  const [label, setLabel] = useState('');
  const [write, setWrite] = useState(true);
  const [ttl, setTtl] = useState('');
  const [minted, setMinted] = useState<string | null>(null);
  const s = useSection();
  const load = () =>
    s.run(() => api<{ keys: KeyInfo[] }>(`/v1/agents/${agent}/keys`)).then((r) => r && setKeys(r.keys));
  useEffect(() => {
    setMinted(null);
    if (agent) void load();
  }, [agent]);
  return (
    <section class="admin-section" aria-labelledby="keys-h">
      <h2 id="keys-h">API keys of {nameOf(agent)}</h2>
      {s.error}
      {minted ? (
        <div class="secret" role="status">
          <p>
            The new key, shown once — keep it now: <code data-testid="new-key">{minted}</code>
          </p>
        </div>
      ) : null}
      <TableWrap label={`API keys`}>
        <table data-testid="keys">
          <caption class="sr-only">API keys</caption>
          <thead>
            <tr>
              <th scope="col">Label</th>
              <th scope="col">Id</th>
              <th scope="col">Scopes</th>
              <th scope="col">State</th>
              <th scope="col">
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {keys.map((k) => (
              <tr key={k.id}>
                <td>{k.label || '—'}</td>
                <td>
                  <code>{k.id}</code>
                </td>
                <td>{k.scopes.join(', ')}</td>
                <td>
                  {k.revokedAt ? 'revoked' : k.expiresAt ? `expires ${k.expiresAt.slice(0, 10)}` : 'active'}
                </td>
                <td>
                  {k.revokedAt ? null : (
                    <button
                      type="button"
                      class="danger"
                      aria-label={`Revoke key ${k.label || k.id}`}
                      onClick={async () => {
                        if (await s.run(() => api(`/v1/keys/${k.id}`, { method: 'DELETE' }), 'Key revoked'))
                          await load();
                      }}
                    >
                      Revoke
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </TableWrap>
      <form
        class="inline"
        onSubmit={async (e) => {
          e.preventDefault();
          const r = await s.run(
            () =>
              api<{ key: string }>(`/v1/agents/${agent}/keys`, {
                body: {
                  label,
                  scopes: write ? ['read', 'write'] : ['read'],
                  ...(ttl ? { ttlDays: Number(ttl) } : {}),
                },
              }),
            'API key created',
          );
          if (r) {
            setMinted(r.key);
            setLabel('');
            await load();
          }
        }}
      >
        <h3>New API key</h3>
        <label for="key-label">Key label</label>
        <input id="key-label" value={label} onInput={(e) => setLabel(e.currentTarget.value)} />
        <label for="key-write" class="check">
          <input
            id="key-write"
            type="checkbox"
            checked={write}
            onChange={(e) => setWrite(e.currentTarget.checked)}
          />{' '}
          May write (else read only)
        </label>
        <label for="key-ttl">Expires after (days)</label>
        <input id="key-ttl" inputMode="numeric" value={ttl} onInput={(e) => setTtl(e.currentTarget.value)} />
        <button type="submit">Create API key</button>
      </form>
    </section>
  );
}

function WebhookSection({ agent }: { agent: string }) {
  const [hook, setHook] = useState<Webhook | null>(null);
  const [url, setUrl] = useState('');
  const [attempts, setAttempts] = useState('8');
  const [secret, setSecret] = useState<string | null>(null);
  const s = useSection();
  const load = async () => {
    try {
      setHook(await api<Webhook>(`/v1/agents/${agent}/webhook`));
    } catch (err) {
      // None set is a state, not an error.
      if (err instanceof ApiError && err.code === 'NOT_FOUND') setHook(null);
      else await s.run(() => Promise.reject(err));
    }
  };
  useEffect(() => {
    setSecret(null);
    if (agent) void load();
  }, [agent]);
  return (
    <section class="admin-section" aria-labelledby="webhook-h">
      <h2 id="webhook-h">Outbound webhook of {nameOf(agent)}</h2>
      {s.error}
      {secret ? (
        <div class="secret" role="status">
          <p>
            Signing secret, shown once: <code data-testid="webhook-secret">{secret}</code>
          </p>
        </div>
      ) : null}
      {hook ? (
        <p data-testid="webhook-current">
          Delivers to <code>{hook.info.url}</code>, {hook.info.maxAttempts} attempts,{' '}
          {hook.deadLetters.length} dead letters.{' '}
          <button
            type="button"
            class="danger"
            onClick={async () => {
              if (
                await s.run(() => api(`/v1/agents/${agent}/webhook`, { method: 'DELETE' }), 'Webhook removed')
              )
                setHook(null);
            }}
          >
            Remove webhook
          </button>
        </p>
      ) : (
        <p>No webhook: the agent’s inbox is not delivered over HTTP.</p>
      )}
      <form
        class="inline"
        onSubmit={async (e) => {
          e.preventDefault();
          const r = await s.run(
            () =>
              api<{ secret: string }>(`/v1/agents/${agent}/webhook`, {
                method: 'PUT',
                body: { url, maxAttempts: Number(attempts) },
              }),
            'Webhook set',
          );
          if (r) {
            setSecret(r.secret);
            await load();
          }
        }}
      >
        <h3>Set the webhook</h3>
        <label for="webhook-url">URL</label>
        <input
          id="webhook-url"
          type="url"
          value={url}
          onInput={(e) => setUrl(e.currentTarget.value)}
          required
        />
        <label for="webhook-attempts">Attempts before dead-lettering</label>
        <input
          id="webhook-attempts"
          inputMode="numeric"
          value={attempts}
          onInput={(e) => setAttempts(e.currentTarget.value)}
        />
        <button type="submit">Set webhook</button>
      </form>
    </section>
  );
}

interface HookInfo {
  id: string;
  room: string;
  label: string;
  createdAt: string;
}

function InboundHooksSection({ agent }: { agent: string }) {
  const [hooks, setHooks] = useState<HookInfo[]>([]);
  const [room, setRoom] = useState('');
  const [label, setLabel] = useState('');
  const [made, setMade] = useState<{ path: string; secret: string } | null>(null);
  const s = useSection();
  const load = () =>
    s.run(() => api<{ hooks: HookInfo[] }>(`/v1/agents/${agent}/hooks`)).then((r) => r && setHooks(r.hooks));
  useEffect(() => {
    setMade(null);
    if (agent) void load();
  }, [agent]);
  return (
    <section class="admin-section" aria-labelledby="hooks-h">
      <h2 id="hooks-h">Inbound webhooks of {nameOf(agent)}</h2>
      {s.error}
      {made ? (
        <div class="secret" role="status">
          <p>
            POST to <code>{made.path}</code>, signed with this secret (shown once):{' '}
            <code data-testid="hook-secret">{made.secret}</code>
          </p>
        </div>
      ) : null}
      {hooks.length ? (
        <ul>
          {hooks.map((h) => (
            <li key={h.id}>
              <code>{h.id}</code> {h.label ? `“${h.label}” ` : ''}posts to <code>{h.room}</code>
            </li>
          ))}
        </ul>
      ) : (
        <p>No inbound webhook speaks as this agent.</p>
      )}
      <form
        class="inline"
        onSubmit={async (e) => {
          e.preventDefault();
          const r = await s.run(
            () =>
              api<{ path: string; secret: string }>(`/v1/agents/${agent}/hooks`, {
                body: { room: room.trim(), ...(label ? { label } : {}) },
              }),
            'Inbound webhook created',
          );
          if (r) {
            setMade({ path: r.path, secret: r.secret });
            await load();
          }
        }}
      >
        <h3>New inbound webhook</h3>
        <label for="hook-room">Room it posts to (room id)</label>
        <input id="hook-room" value={room} onInput={(e) => setRoom(e.currentTarget.value)} required />
        <label for="hook-label">Hook label</label>
        <input id="hook-label" value={label} onInput={(e) => setLabel(e.currentTarget.value)} />
        <button type="submit">Create inbound webhook</button>
      </form>
    </section>
  );
}

/** `/admin`. */
export function AdminPage() {
  const [org, setOrg] = useState(me.value?.org ?? '');
  const [agents, setAgents] = useState<AgentListing[]>([]);
  const [people, setPeople] = useState<Human[]>([]);
  const [agent, setAgent] = useState('');
  const s = useSection();
  const loadPeople = () =>
    s.run(() => api<{ users: Human[] }>(`/v1/users?org=${org}`)).then((r) => r && setPeople(r.users));
  useEffect(() => {
    if (!org) return;
    void loadPeople();
    void s
      .run(() => api<{ agents: AgentListing[] }>(`/v1/inventory?org=${org}&limit=100`))
      .then((r) => {
        if (!r) return;
        setAgents(r.agents);
        setAgent((a) => a || r.agents[0]?.agent.id || '');
      });
  }, [org]);
  return (
    <div class="page">
      <h1>Admin</h1>
      <p>
        Org <code>{org}</code>. The API reference is at <a href="/docs">/docs</a>.
      </p>
      {s.error}
      <OrgsSection org={org} setOrg={setOrg} />
      <PeopleSection org={org} people={people} reload={() => void loadPeople()} />
      <GrantsSection org={org} people={people} />
      <section class="admin-section" aria-labelledby="agents-h">
        <h2 id="agents-h">Agents of the org ({agents.length})</h2>
        <TableWrap label={`Agents of the org`}>
          <table>
            <caption class="sr-only">Agents of the org</caption>
            <thead>
              <tr>
                <th scope="col">Agent</th>
                <th scope="col">Owner</th>
                <th scope="col">Status</th>
                <th scope="col">Presence</th>
              </tr>
            </thead>
            <tbody>
              {agents.map((a) => (
                <tr key={a.agent.id}>
                  <td>
                    {a.agent.card.name} <code>{a.agent.id}</code>
                  </td>
                  <td>{people.find((p) => p.id === a.agent.owner)?.name ?? a.agent.owner}</td>
                  <td>{a.agent.status}</td>
                  <td>{a.presence.state}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </TableWrap>
        <div class="inline">
          <label for="admin-agent">Keys and webhook of</label>
          <select id="admin-agent" value={agent} onChange={(e) => setAgent(e.currentTarget.value)}>
            {agents.map((a) => (
              <option key={a.agent.id} value={a.agent.id}>
                {a.agent.card.name}
              </option>
            ))}
          </select>
        </div>
      </section>
      <BudgetSection agents={agents} people={people} />
      {agent ? <KeysSection agent={agent} /> : null}
      {agent ? <WebhookSection agent={agent} /> : null}
      {agent ? <InboundHooksSection agent={agent} /> : null}
    </div>
  );
}
