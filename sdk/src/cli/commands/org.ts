import { registryApi } from '@parley/contracts';
import type { Command } from 'commander';
import type { CliContext } from '../context.js';

/** `parley org create|list`. */
export function registerOrgCommands(program: Command, ctx: CliContext): void {
  const org = program.command('org').description('organisations');
  org
    .command('create <name>')
    .description('create an organisation (the superadmin only)')
    .action(async (name: string, _o, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const created = await agent.call(registryApi.createOrg, { name });
        ctx.print(cmd, created, (o) => `${o.id}  ${o.name}`);
      });
    });
  org
    .command('list')
    .description('organisations you can see')
    .action(async (_o, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const { orgs } = await agent.call(registryApi.listOrgs, {});
        ctx.print(cmd, { orgs }, (r) => r.orgs.map((o) => `${o.id}  ${o.name}`).join('\n') || '(none)');
      });
    });
}
