import { HumanRole, registryApi } from '@parley/contracts';
import { type Command, Option } from 'commander';
import type { CliContext } from '../context.js';
import { assertWritable, writeCredsFile } from '../creds-file.js';

/** `parley user create`. */
export function registerUserCommands(program: Command, ctx: CliContext): void {
  const user = program.command('user').description('humans');
  user
    .command('create <name>')
    .description('add a person to an organisation (an admin of it) and write their creds, once')
    .requiredOption('--org <org>', 'organisation id (org_…)')
    .requiredOption('--out <file>', 'where to write the creds file (mode 0600; never overwritten)')
    .addOption(new Option('--role <role>', 'role in the org').choices(HumanRole.options).default('member'))
    .option('--email <email>', 'email address')
    .action(
      async (
        name: string,
        o: { org: string; out: string; role: 'admin' | 'member'; email?: string },
        cmd: Command,
      ) => {
        const out = assertWritable(o.out);
        await ctx.withAgent(cmd, async (agent) => {
          const r = await agent.call(registryApi.createUser, {
            name,
            org: o.org,
            role: o.role,
            ...(o.email ? { email: o.email } : {}),
          });
          await writeCredsFile(out, r.credentials.creds);
          ctx.print(
            cmd,
            { ...r.user, creds: out, userPublicKey: r.credentials.userPublicKey },
            (u) => `${u.id}  ${u.name}  ${u.role} in ${u.org}\ncreds written to ${out} (0600)`,
          );
        });
      },
    );
}
