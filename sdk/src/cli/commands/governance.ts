import { governanceApi, mcpApi, ParleyError, readDelegationToken } from '@parley/contracts';
import { type Command, Option } from 'commander';
import type { CliContext } from '../context.js';
import { formatChain, formatUsage } from './governance-format.js';

const int = (flag: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${flag} must be a whole number`);
  return n;
};
const num = (flag: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${flag} must be a positive number`);
  return n;
};

/**
 * Governance commands: `parley agent suspend|resume` (the kill switch), `parley token
 * issue|exchange|revoke|show`, `parley usage`, `parley audit chain`, `parley policy grants|org`,
 * `parley budget set`.
 */
export function registerGovernanceCommands(program: Command, ctx: CliContext): void {
  const agentCmd =
    program.commands.find((c) => c.name() === 'agent') ?? program.command('agent').description('agents');

  agentCmd
    .command('suspend <agentId>')
    .description(
      'kill switch: refuse the agent’s messages everywhere within a second and deny its tool calls',
    )
    .requiredOption('--reason <text>', 'why (the owner is told)')
    .action(async (id: string, o: { reason: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(governanceApi.suspend, { agent: id, reason: o.reason });
        ctx.print(cmd, r, (v) => `${v.agent}: suspended (${v.reason})`);
      });
    });

  agentCmd
    .command('resume <agentId>')
    .description('lift a suspension')
    .option('--reason <text>', 'why', 'resumed')
    .action(async (id: string, o: { reason: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(governanceApi.resume, { agent: id, reason: o.reason });
        ctx.print(cmd, r, (v) => `${v.agent}: ${v.status}`);
      });
    });

  const token = program.command('token').description('delegation tokens: act on someone’s behalf');
  token
    .command('issue <agentId>')
    .description('delegate scopes to an agent for a task (prints the token)')
    .requiredOption('--scope <scope...>', 'scopes to delegate (ones you hold)')
    .option('--ttl <seconds>', 'lifetime', int('--ttl'), 3600)
    .option('--for <usrId>', 'admins: the person the token speaks for')
    .option('--task <taskId>', 'the task it is for')
    .action(
      async (
        actor: string,
        o: { scope: string[]; ttl: number; for?: string; task?: string },
        cmd: Command,
      ) => {
        await ctx.withAgent(cmd, async (agent) => {
          const r = await agent.call(governanceApi.issueToken, {
            actor,
            scope: o.scope,
            ttlSeconds: o.ttl,
            ...(o.for ? { onBehalfOf: o.for } : {}),
            ...(o.task ? { task: o.task } : {}),
          });
          ctx.print(
            cmd,
            r,
            (v) =>
              `${v.token}\n# ${v.jti} for ${v.chain.join(' → ')}, scope ${v.scope.join(' ')}${v.dropped.length ? ` (dropped ${v.dropped.join(' ')})` : ''}, expires ${v.expiresAt}`,
          );
        });
      },
    );
  token
    .command('exchange <token> <agentId>')
    .description('pass a token you act under to another agent (scope narrows, expiry never grows)')
    .option('--scope <scope...>', 'narrow to these scopes')
    .option('--ttl <seconds>', 'shorter lifetime', int('--ttl'))
    .option('--room <roomId>', 'a room you both are members of (if you are not contacts)')
    .action(
      async (
        tok: string,
        actor: string,
        o: { scope?: string[]; ttl?: number; room?: string },
        cmd: Command,
      ) => {
        await ctx.withAgent(cmd, async (agent) => {
          const r = await agent.call(governanceApi.exchangeToken, {
            token: tok,
            actor,
            ...(o.scope ? { scope: o.scope } : {}),
            ...(o.ttl !== undefined ? { ttlSeconds: o.ttl } : {}),
            ...(o.room ? { room: o.room } : {}),
          });
          ctx.print(
            cmd,
            r,
            (v) => `${v.token}\n# ${v.jti} for ${v.chain.join(' → ')}, scope ${v.scope.join(' ')}`,
          );
        });
      },
    );
  token
    .command('revoke [jti]')
    .description(
      'revoke a delegation token (and every token exchanged from it), or --principal: every token of a participant; an MCP HTTP token by its id (mtk_…, what parley connect --transport http mints)',
    )
    .option('--principal <id>', 'revoke every token this participant takes part in')
    .option('--reason <text>', 'why', 'revoked')
    .action(async (jti: string | undefined, o: { principal?: string; reason: string }, cmd: Command) => {
      if (!jti === !o.principal)
        throw new ParleyError('INVALID_ARGUMENT', 'give a jti (or mtk_… id) or --principal <id>, not both');
      if (jti?.startsWith('mtk_')) {
        await ctx.withAgent(cmd, async (agent) => {
          const r = await agent.call(mcpApi.revokeToken, { id: jti });
          ctx.print(cmd, r, (v) => `${v.id}: ${v.revoked ? 'MCP token revoked' : 'already revoked'}`);
        });
        return;
      }
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(governanceApi.revokeToken, {
          ...(jti ? { jti } : { principal: o.principal as string }),
          reason: o.reason,
        });
        ctx.print(
          cmd,
          r,
          (v) => `${v.id}: ${v.revoked === 'token' ? 'token revoked' : 'every token revoked'} at ${v.at}`,
        );
      });
    });
  token
    .command('show <token>')
    .description('what a token says: principal, chain, scope, expiry (not verified)')
    .action((tok: string, _o, cmd: Command) => {
      const v = readDelegationToken(tok);
      ctx.print(
        cmd,
        {
          jti: v.claims.jti,
          principal: v.principal,
          chain: v.chain,
          scope: v.scope,
          expiresAt: v.expiresAt.toISOString(),
        },
        (x) =>
          `${x.jti}: ${x.chain.join(' → ')} acting for ${x.principal}\nscope ${x.scope.join(' ')}\nexpires ${x.expiresAt}`,
      );
    });

  program
    .command('usage')
    .description('model usage and cost you may see, summed by agent, owner, org, room, day, task or binding')
    .addOption(
      new Option('--by <key>', 'group by (task and binding: only reports that named one)')
        .choices(['agent', 'owner', 'org', 'room', 'day', 'task', 'binding'])
        .default('agent'),
    )
    .option('--since <date>', 'first day, YYYY-MM-DD (UTC; default today)')
    .option('--until <date>', 'last day, YYYY-MM-DD (UTC; default today)')
    .option('--org <orgId>', 'only this org')
    .option('--agent <agentId>', 'only this agent')
    .action(
      async (
        o: {
          by: 'agent' | 'owner' | 'org' | 'room' | 'day' | 'task' | 'binding';
          since?: string;
          until?: string;
          org?: string;
          agent?: string;
        },
        cmd: Command,
      ) => {
        await ctx.withAgent(cmd, async (agent) => {
          const r = await agent.call(governanceApi.usage, {
            by: o.by,
            ...(o.since ? { since: o.since } : {}),
            ...(o.until ? { until: o.until } : {}),
            ...(o.org ? { org: o.org } : {}),
            ...(o.agent ? { agent: o.agent } : {}),
          });
          ctx.print(cmd, r, formatUsage);
        });
      },
    );

  const audit = program.command('audit').description('the audit log');
  audit
    .command('chain <id>')
    .description('walk a message (msg_…) or tool call (tc_…) back to the human who started it')
    .action(async (id: string, _o, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        ctx.print(
          cmd,
          await agent.call(governanceApi.auditChain, { of: id }, { timeout: 30_000 }),
          formatChain,
        );
      });
    });

  const policy = program.command('policy').description('who holds which scopes');
  policy
    .command('grants <usrId> [scopes...]')
    .description('set the scopes a person holds (admins; replaces the list; none = clear it)')
    .action(async (user: string, scopes: string[], _o, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(governanceApi.setGrants, { participant: user, scopes });
        ctx.print(cmd, r, (v) => `${v.participant} holds ${v.scopes.join(' ') || 'nothing'}`);
      });
    });
  policy
    .command('org <orgId>')
    .description('set an org’s policy (admins): scopes every member holds, scopes nobody may use')
    .option('--grant <scope...>', 'scopes every member holds', [])
    .option('--deny <scope...>', 'scopes nobody may use', [])
    .option(
      '--require-approval <scope=approver...>',
      'tool calls within scope wait for approver’s yes: owner, principal, org_admin or a usr_ id (e.g. payments:*=owner)',
      [],
    )
    .action(
      async (
        org: string,
        o: { grant: string[]; deny: string[]; requireApproval: string[] },
        cmd: Command,
      ) => {
        const requireApproval = o.requireApproval.map((r) => {
          const i = r.lastIndexOf('=');
          if (i <= 0)
            throw new ParleyError('INVALID_ARGUMENT', `--require-approval takes scope=approver, not ${r}`);
          return { scope: r.slice(0, i), approver: r.slice(i + 1) };
        });
        await ctx.withAgent(cmd, async (agent) => {
          const r = await agent.call(governanceApi.setOrgPolicy, {
            org,
            grants: o.grant,
            deny: o.deny,
            requireApproval,
          });
          ctx.print(
            cmd,
            r,
            (v) =>
              `${v.org}: grants ${v.grants.join(' ') || '-'}; denies ${v.deny.join(' ') || '-'}; approval ${v.requireApproval.map((a) => `${a.scope}=${a.approver}`).join(' ') || '-'}`,
          );
        });
      },
    );

  program
    .command('budget')
    .description('budgets on tokens and cost')
    .command('set')
    .description(
      'set the budget of an agent (its owner, an admin) or of an owner over all its agents (an admin)',
    )
    .option('--agent <agentId>', 'the agent')
    .option('--owner <usrId>', 'the owner (all its agents together)')
    .option('--tokens-per-day <n>', 'input + output tokens per UTC day', int('--tokens-per-day'))
    .option('--tokens-per-month <n>', 'per UTC month', int('--tokens-per-month'))
    .option('--cost-per-day <usd>', 'USD per UTC day', num('--cost-per-day'))
    .option('--cost-per-month <usd>', 'USD per UTC month', num('--cost-per-month'))
    .addOption(
      new Option('--on-exceed <action>', 'what crossing it does')
        .choices(['suspend', 'pause_room'])
        .default('suspend'),
    )
    .action(
      async (
        o: {
          agent?: string;
          owner?: string;
          tokensPerDay?: number;
          tokensPerMonth?: number;
          costPerDay?: number;
          costPerMonth?: number;
          onExceed: 'suspend' | 'pause_room';
        },
        cmd: Command,
      ) => {
        const limitsGiven = [o.tokensPerDay, o.tokensPerMonth, o.costPerDay, o.costPerMonth].some(
          (v) => v !== undefined,
        );
        if (!limitsGiven) {
          throw new ParleyError(
            'INVALID_ARGUMENT',
            'a budget needs a limit: give --tokens-per-day, --tokens-per-month, --cost-per-day or --cost-per-month',
          );
        }
        if (!o.agent === !o.owner) {
          throw new ParleyError('INVALID_ARGUMENT', 'give --agent <agt_…> or --owner <usr_…> (one of them)');
        }
        await ctx.withAgent(cmd, async (agent) => {
          const r = await agent.call(governanceApi.setBudget, {
            ...(o.agent ? { agent: o.agent } : {}),
            ...(o.owner ? { owner: o.owner } : {}),
            ...(o.tokensPerDay !== undefined ? { tokensPerDay: o.tokensPerDay } : {}),
            ...(o.tokensPerMonth !== undefined ? { tokensPerMonth: o.tokensPerMonth } : {}),
            ...(o.costPerDay !== undefined ? { costUsdPerDay: o.costPerDay } : {}),
            ...(o.costPerMonth !== undefined ? { costUsdPerMonth: o.costPerMonth } : {}),
            onExceed: o.onExceed,
          });
          ctx.print(cmd, r, (v) => `budget of ${v.kind} ${v.id} set (on exceed: ${v.onExceed})`);
        });
      },
    );
}
