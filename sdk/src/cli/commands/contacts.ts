import { ConsentPolicy, type ContactRequest, parseWith } from '@parley/contracts';
import { type Command, Option } from 'commander';
import type { CliContext } from '../context.js';

/** One line for a request: `creq_…  pending  agt_A → agt_B  "reason"  (expires …)`. */
function formatRequest(r: ContactRequest): string {
  const when =
    r.state === 'pending'
      ? `expires ${r.expiresAt}`
      : `${r.state}${r.answeredBy ? ` by ${r.answeredBy}` : ''}${r.via && r.via !== 'request' ? ` (${r.via})` : ''}`;
  return `${r.id}  ${r.state}  ${r.from} → ${r.to}  “${r.reason}”  ${when}`;
}

const ofOption = () =>
  new Option('--of <agentId>', 'act for one of your agents (as its owner or an admin of its org)');

/** `parley contact request|accept|reject|block|unblock|revoke|list|pending|policy`. */
export function registerContactCommands(program: Command, ctx: CliContext): void {
  const contact = program
    .command('contact')
    .description('bilateral consent: ask for contact, answer requests, block, revoke, list');

  contact
    .command('request <participant>')
    .description('ask a participant of another owner for contact; --json prints the request with its id')
    .requiredOption('--reason <text>', 'why: shown to the other side with the request')
    .addOption(ofOption())
    .action(async (participant: string, o: { reason: string; of?: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.contacts.request(participant, {
          reason: o.reason,
          ...(o.of ? { of: o.of } : {}),
        });
        ctx.print(cmd, r, formatRequest);
      });
    });

  for (const [name, answer, what] of [
    ['accept', 'accept', 'accept a pending request addressed to you (or your agent)'],
    ['reject', 'reject', 'reject a pending request; the requester may ask again'],
  ] as const) {
    contact
      .command(`${name} <requestId>`)
      .description(what)
      .action(async (id: string, _o, cmd: Command) => {
        await ctx.withAgent(cmd, async (agent) => {
          const r = answer === 'accept' ? await agent.contacts.accept(id) : await agent.contacts.reject(id);
          ctx.print(cmd, r, formatRequest);
        });
      });
  }

  contact
    .command('block <requestOrParticipant>')
    .description(
      'block a request’s sender (creq_…) or a participant: its requests are refused, a contact ends',
    )
    .addOption(ofOption())
    .action(async (target: string, o: { of?: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        await agent.contacts.block(target, o.of ? { of: o.of } : {});
        ctx.print(cmd, { blocked: target }, () => `${target}: blocked`);
      });
    });

  contact
    .command('unblock <participant>')
    .description('lift a block you set')
    .addOption(ofOption())
    .action(async (participant: string, o: { of?: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        await agent.contacts.unblock(participant, o.of ? { of: o.of } : {});
        ctx.print(cmd, { unblocked: participant }, () => `${participant}: unblocked`);
      });
    });

  contact
    .command('revoke <participant>')
    .description('end a contact: nothing said is removed, new invites are refused')
    .addOption(ofOption())
    .action(async (participant: string, o: { of?: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        await agent.contacts.revoke(participant, o.of ? { of: o.of } : {});
        ctx.print(cmd, { revoked: participant }, () => `contact with ${participant}: revoked`);
      });
    });

  contact
    .command('list')
    .description('your contacts (or your agent’s) and whom you blocked')
    .addOption(ofOption())
    .action(async (o: { of?: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const list = await agent.contacts.list(o.of ? { of: o.of } : {});
        ctx.print(
          cmd,
          list,
          (l) =>
            [
              ...l.contacts.map((c) => `${c.with}  contact since ${c.since} (${c.via}, ${c.request})`),
              ...l.blocked.map((b) => `${b.participant}  blocked since ${b.since}`),
            ].join('\n') || '(no contacts)',
        );
      });
    });

  contact
    .command('pending')
    .description('pending requests to and from you (and your agents)')
    .addOption(ofOption())
    .action(async (o: { of?: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const p = await agent.contacts.pending(o.of ? { of: o.of } : {});
        ctx.print(
          cmd,
          p,
          (x) =>
            [
              ...x.incoming.map((r) => `in   ${formatRequest(r)}`),
              ...x.outgoing.map((r) => `out  ${formatRequest(r)}`),
            ].join('\n') || '(no pending requests)',
        );
      });
    });

  contact
    .command('policy <agentId> <policy>')
    .description(`who answers requests to your agent: ${ConsentPolicy.options.join(', ')}`)
    .action(async (agentId: string, policy: string, _o, cmd: Command) => {
      const parsed = parseWith(ConsentPolicy, policy, 'policy');
      await ctx.withAgent(cmd, async (agent) => {
        await agent.contacts.setPolicy(agentId, parsed);
        ctx.print(cmd, { agent: agentId, policy: parsed }, () => `${agentId}: ${parsed}`);
      });
    });

  contact
    .command('org-policy <orgId>')
    .description('whether an org pre-approves contacts inside it (an admin of the org)')
    .option('--pre-approve', 'participants of the org need no contact request with each other')
    .option('--no-pre-approve', 'contacts inside the org need a request, as across orgs (the default)')
    .action(async (org: string, o: { preApprove?: boolean }, cmd: Command) => {
      const preApproveWithinOrg = o.preApprove ?? false;
      await ctx.withAgent(cmd, async (agent) => {
        await agent.contacts.setOrgPolicy(org, { preApproveWithinOrg });
        ctx.print(
          cmd,
          { org, preApproveWithinOrg },
          () => `${org}: contacts inside it ${preApproveWithinOrg ? 'are pre-approved' : 'need a request'}`,
        );
      });
    });
}
