import { RuntimeKind } from '@parley/contracts';
import { type Command, Option } from 'commander';
import type { CliContext } from '../context.js';
import { formatListings } from './listing.js';

/** `parley discover`. */
export function registerDiscoverCommands(program: Command, ctx: CliContext): void {
  program
    .command('discover')
    .description(
      'find agents you may see by skill, tag, text, runtime, owner or org (exact skill matches first)',
    )
    .option('--skill <id>', 'a skill id (exact matches rank first, then prefixes and skill names)')
    .option('--tag <tag>', 'a skill tag')
    .option('--text <words>', 'words in the name, description or skills')
    .addOption(new Option('--runtime <kind>', 'runtime').choices(RuntimeKind.options))
    .option('--owner <usrId>', 'agents of this person')
    .option('--org <org>', 'agents of this organisation')
    .option('--limit <n>', 'page size', (v) => Number.parseInt(v, 10), 20)
    .option('--cursor <cursor>', 'the next page (printed after a page)')
    .action(
      async (
        o: {
          skill?: string;
          tag?: string;
          text?: string;
          runtime?: RuntimeKind;
          owner?: string;
          org?: string;
          limit: number;
          cursor?: string;
        },
        cmd: Command,
      ) => {
        await ctx.withAgent(cmd, async (agent) => {
          const { limit, ...filters } = o;
          const page = await agent.directory.discover({ ...filters, limit } as Parameters<
            typeof agent.directory.discover
          >[0]);
          ctx.print(
            cmd,
            page,
            (p) => `${formatListings(p.agents)}${p.next ? `\nmore: --cursor ${p.next}` : ''}`,
          );
        });
      },
    );
}
