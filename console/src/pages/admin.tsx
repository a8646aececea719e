/** Admins: the org's agents (inventory of the org) with the kill switch, and where the rest is managed today. */
import { useEffect, useState } from 'preact/hooks';
import { type AgentListing, api } from '../api';
import { me } from '../state';

/** `/admin`. */
export function AdminPage() {
  const [agents, setAgents] = useState<AgentListing[]>([]);
  const org = me.value?.org;
  useEffect(() => {
    if (org)
      void api<{ agents: AgentListing[] }>(`/v1/inventory?org=${org}&limit=200`)
        .then((r) => setAgents(r.agents))
        .catch(() => undefined);
  }, [org]);
  return (
    <div class="page">
      <h1>Admin</h1>
      <p>
        Org <code>{org}</code>. The API reference is at <a href="/docs">/docs</a>.
      </p>
      <h2>Agents of the org ({agents.length})</h2>
      <table>
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
              <td>
                <code>{a.agent.owner}</code>
              </td>
              <td>{a.agent.status}</td>
              <td>{a.presence.state}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <h2>Keys and webhooks</h2>
      <pre>
        <code>{`npx parley key create --for agt_… --scopes read,write
npx parley hook create --agent agt_… --room room_…`}</code>
      </pre>
    </div>
  );
}
