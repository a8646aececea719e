import { HumanRole, registryApi } from '@parley/contracts';
import { type Command, Option } from 'commander';
import type { CliContext } from '../context.js';
import { assertWritable, writeCredsFile } from '../creds-file.js';

/** Rows as left-aligned columns. */
function columns(rows: string[][]): string {
  const widths = (rows[0] ?? []).map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i] ?? 0))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** `parley user create|list`. */
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
  user
    .command('list')
    .description('the people of your organisation (the superadmin: of --org)')
    .option('--org <org>', 'organisation id (org_…); default: yours')
    .action(async (o: { org?: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(registryApi.listUsers, o.org ? { org: o.org } : {});
        ctx.print(cmd, r, (v) =>
          v.users.length === 0
            ? '(no people)'
            : columns([
                ['ID', 'NAME', 'ROLE', 'ORG', 'EMAIL'],
                ...v.users.map((u) => [
                  u.id,
                  u.name,
                  u.superadmin ? `${u.role}, superadmin` : u.role,
                  u.org,
                  u.email ?? '',
                ]),
              ]),
        );
      });
    });
}
