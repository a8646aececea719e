import type { Agent, AgentListing } from '@parley/contracts';

/** One line per agent: id, name, owner, runtime, visibility, presence, activity, last seen. */
export function formatListings(agents: AgentListing[]): string {
  if (agents.length === 0) return '(no agents)';
  const rows = agents.map(({ agent, presence }) => [
    agent.id,
    agent.card.name,
    agent.owner,
    agent.card.runtime,
    agent.card.visibility,
    agent.status === 'active' ? presence.state : agent.status,
    presence.activity ?? '',
    presence.lastSeen ?? '',
  ]);
  const header = ['ID', 'NAME', 'OWNER', 'RUNTIME', 'VISIBILITY', 'PRESENCE', 'ACTIVITY', 'LAST SEEN'];
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => (r[i] ?? '').length)));
  return all
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i] ?? 0))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** An agent's card in a few lines; `presence` adds its presence line. */
export function formatAgentCard(agent: Agent, presence?: AgentListing['presence']): string {
  const c = agent.card;
  return [
    `${agent.id}  ${c.name}  (${c.runtime}, ${c.visibility}, ${agent.status})`,
    `owner ${agent.owner}  org ${agent.org}  revision ${agent.revision}`,
    ...(presence
      ? [
          `presence ${presence.state}${presence.activity ? ` — ${presence.activity}` : ''}${presence.lastSeen ? `  last seen ${presence.lastSeen}` : ''}`,
        ]
      : []),
    ...(c.description ? [c.description] : []),
    ...c.skills.map((s) => `  skill ${s.id}: ${s.name}${s.tags.length ? ` [${s.tags.join(', ')}]` : ''}`),
    ...(c.tools.length ? [`tools ${c.tools.join(', ')}`] : []),
    ...(c.scopes.length ? [`scopes ${c.scopes.join(', ')}`] : []),
  ].join('\n');
}

/** A listing (card and presence) in a few lines. */
export function formatAgent({ agent, presence }: AgentListing): string {
  return formatAgentCard(agent, presence);
}
