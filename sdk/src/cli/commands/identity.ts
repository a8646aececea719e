import type { Command } from 'commander';
import type { CliContext } from '../context.js';

/** `parley whoami`. */
export function registerIdentityCommands(program: Command, ctx: CliContext): void {
  program
    .command('whoami')
    .description('show who the creds belong to, as the registry knows them')
    .action(async (_o, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const me = await agent.whoami();
        ctx.print(cmd, me, (m) =>
          [m.id, m.kind, m.name, m.org ? `org ${m.org}` : undefined, m.role].filter(Boolean).join('  '),
        );
      });
    });
}
