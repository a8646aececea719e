/** Text output of the governance commands: usage tables and audit chains. */
import type { ApiResponse, AuditHop, governanceApi } from '@parley/contracts';

/** Columns padded to the widest cell. */
export function table(header: string[], rows: string[][]): string {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => (r[i] ?? '').length)));
  return all
    .map((r) =>
      r
        .map((c, i) =>
          i >= header.length - 4 && i > 0 ? c.padStart(widths[i] ?? 0) : c.padEnd(widths[i] ?? 0),
        )
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

// Micro-dollar precision, without trailing zeros past the cents: $2.50, $0.0031, $0.300001.
const usd = (n: number) => `$${n.toFixed(6).replace(/0{1,4}$/, '')}`;

/** `parley usage` as a table with a total line. */
export function formatUsage(r: ApiResponse<typeof governanceApi.usage>): string {
  const period = r.since === r.until ? r.since : `${r.since} … ${r.until}`;
  if (r.rows.length === 0) return `usage by ${r.by}, ${period}: nothing reported`;
  const row = (key: string, u: (typeof r.rows)[number]) => [
    key,
    String(u.inputTokens),
    String(u.outputTokens),
    usd(u.costUsd),
    String(u.reports),
  ];
  return [
    `usage by ${r.by}, ${period} (UTC)`,
    table(
      [r.by.toUpperCase(), 'INPUT TOKENS', 'OUTPUT TOKENS', 'COST', 'REPORTS'],
      // The wire's `-` is usage reported outside any room.
      [
        ...r.rows.map((u) => row(r.by === 'room' && u.key === '-' ? 'no room' : u.key, u)),
        row('total', r.total),
      ],
    ),
  ].join('\n');
}

function hopLine(h: AuditHop, i: number): string[] {
  if (h.redacted)
    return [
      `${i + 1}. ${h.kind === 'tool_call' ? 'tool call' : 'message'} ${h.id}  in a room you may not read`,
      `     at ${h.at}`,
    ];
  const who =
    h.onBehalfOf.length > 1
      ? `${h.actor} for ${h.onBehalfOf[0]} (chain ${h.onBehalfOf.join(' → ')})`
      : h.actor;
  const head =
    h.kind === 'tool_call'
      ? `${i + 1}. tool call ${h.id}  ${h.tool ?? ''}  by ${who}  → ${h.status ?? ''}`
      : `${i + 1}. message ${h.id}  in ${h.room ?? '?'} (hop ${h.hop ?? 0})  from ${who}`;
  const lines = [head];
  if (h.text) lines.push(`     "${h.text}"`);
  if (h.linkUnverified)
    lines.push(`     caused by ${h.causedBy ?? '?'}: not followed (its sender could not read that message)`);
  if (h.decision) {
    lines.push(
      `     ${h.decision.allow ? 'allowed' : `DENIED${h.decision.code ? ` (${h.decision.code})` : ''}`} — decided by ${h.decision.decidedBy}: ${h.decision.reason}`,
    );
  }
  if (h.tokenId) lines.push(`     token ${h.tokenId}${h.scope ? ` scope ${h.scope.join(' ')}` : ''}`);
  lines.push(`     at ${h.at}${h.traceId ? `  trace ${h.traceId}` : ''}`);
  return lines;
}

/** `parley audit chain` in words, newest hop first, ending at the human who started it. */
export function formatChain(r: ApiResponse<typeof governanceApi.auditChain>): string {
  const lines = r.hops.flatMap(hopLine);
  lines.push(
    r.origin
      ? `started by ${r.origin}${r.complete ? '' : ' (some hops are no longer in the log)'}`
      : 'origin unknown',
  );
  return lines.join('\n');
}
