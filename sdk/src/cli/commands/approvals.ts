import { type Approval, ApprovalState } from '@parley/contracts';
import type { Command } from 'commander';
import type { CliContext } from '../context.js';

function line(a: Approval): string {
  const decided = a.decidedBy ? ` by ${a.decidedBy}: ${a.decision ?? ''}` : ` until ${a.expiresAt}`;
  return `${a.id}  ${a.state.padEnd(9)} ${a.requester} → ${a.tool} (${a.action}) for ${a.principal}${decided}${a.reason ? `\n    why: ${JSON.stringify(a.reason)}` : ''}`;
}

/** `parley approvals list|approve|deny`: tool calls org policy holds for a person's yes. */
export function registerApprovalCommands(program: Command, ctx: CliContext): void {
  const approvals = program
    .command('approvals')
    .description('tool calls held for your approval by org policy (requires_approval)');
  approvals
    .command('list')
    .description('approvals you may decide (or asked for); pending ones unless --state says otherwise')
    .option('--state <state...>', `any of ${ApprovalState.options.join(', ')}`, ['pending'])
    .action(async (o: { state: string[] }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const list = await agent.approvals.list(o.state.map((s) => ApprovalState.parse(s)));
        ctx.print(cmd, list, (l) => (l.length ? l.map(line).join('\n') : 'no approvals'));
      });
    });
  for (const [name, verb] of [
    ['approve', 'approve'],
    ['deny', 'deny'],
  ] as const) {
    approvals
      .command(`${name} <id>`)
      .description(
        name === 'approve'
          ? 'let the held call run (audited with your reason)'
          : 'refuse the held call: it fails with APPROVAL_DENIED and your reason',
      )
      .requiredOption('--reason <text>', 'why (the requester and the audit see it)')
      .action(async (id: string, o: { reason: string }, cmd: Command) => {
        await ctx.withAgent(cmd, async (agent) => {
          const a =
            verb === 'approve'
              ? await agent.approvals.approve(id, o.reason)
              : await agent.approvals.deny(id, o.reason);
          ctx.print(cmd, a, line);
        });
      });
  }
}
