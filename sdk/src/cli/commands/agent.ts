import { readFile } from 'node:fs/promises';
import {
  type AgentCardInput,
  a2aApi,
  governanceApi,
  ParleyError,
  RuntimeKind,
  registryApi,
  Visibility,
} from '@parley/contracts';
import { type Command, Option } from 'commander';
import type { CliContext } from '../context.js';
import { assertWritable, writeCredsFile } from '../creds-file.js';
import { formatAgent, formatListings } from './listing.js';

interface CreateOptions {
  owner?: string;
  skill?: string[];
  card?: string;
  runtime?: AgentCardInput['runtime'];
  visibility?: AgentCardInput['visibility'];
  description?: string;
  out: string;
}

async function readCard(path: string): Promise<Record<string, unknown>> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ParleyError('INVALID_ARGUMENT', `cannot read card file ${path}: ${(err as Error).message}`);
  }
  try {
    const card = JSON.parse(text);
    if (typeof card !== 'object' || card === null || Array.isArray(card)) throw new Error('not an object');
    return card;
  } catch (err) {
    throw new ParleyError('INVALID_ARGUMENT', `${path} is not a JSON agent card: ${(err as Error).message}`);
  }
}

/** `parley agent create|list|show|rotate|revoke|deregister`. */
export function registerAgentCommands(program: Command, ctx: CliContext): void {
  const agentCmd = program.command('agent').description('agents: onboarding, inventory, credentials');

  agentCmd
    .command('create <name>')
    .description(
      'register an agent, create its inbox and write its creds, once: then connect({ creds }) just works',
    )
    .requiredOption('--out <file>', 'where to write the creds file (mode 0600; never overwritten)')
    .option('--owner <usrId>', 'the human who owns it (default: you; an admin may name someone in the org)')
    .option('--skill <id...>', 'skill ids it offers (repeatable)')
    .option('--card <file>', 'an agent card (JSON, A2A-compatible plus runtime/tools/scopes/visibility)')
    .addOption(new Option('--runtime <kind>', 'the runtime it runs in').choices(RuntimeKind.options))
    .addOption(new Option('--visibility <v>', 'who may find it').choices(Visibility.options))
    .option('--description <text>', 'what it does')
    .action(async (name: string, o: CreateOptions, cmd: Command) => {
      const out = assertWritable(o.out);
      const card: Record<string, unknown> = o.card ? await readCard(o.card) : {};
      card.name = name;
      if (o.description !== undefined) card.description = o.description;
      if (o.runtime) card.runtime = o.runtime;
      if (o.visibility) card.visibility = o.visibility;
      if (o.skill?.length) {
        const existing = Array.isArray(card.skills) ? (card.skills as { id?: unknown }[]) : [];
        const ids = new Set(existing.map((s) => s.id));
        card.skills = [...existing, ...o.skill.filter((id) => !ids.has(id)).map((id) => ({ id, name: id }))];
      }
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(registryApi.createAgent, {
          card: card as AgentCardInput,
          ...(o.owner ? { owner: o.owner } : {}),
        });
        await writeCredsFile(out, r.credentials.creds);
        ctx.print(
          cmd,
          {
            id: r.agent.id,
            name: r.agent.card.name,
            owner: r.agent.owner,
            org: r.agent.org,
            revision: r.agent.revision,
            creds: out,
            userPublicKey: r.credentials.userPublicKey,
          },
          (a) => `${a.id}  ${a.name}  owner ${a.owner}\ncreds written to ${out} (0600)`,
        );
      });
    });

  agentCmd
    .command('list')
    .description('inventory: agents with owner, runtime, visibility, tools, scopes, presence, last activity')
    .option('--org <org>', 'agents of this organisation')
    .option('--owner <usrId>', 'agents of this person')
    .option('--limit <n>', 'at most this many', (v) => Number.parseInt(v, 10), 10_000)
    .action(async (o: { org?: string; owner?: string; limit: number }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const agents = await agent.directory.all(
          (cursor) =>
            agent.directory.listAgents({
              limit: 200,
              ...(o.org ? { org: o.org } : {}),
              ...(o.owner ? { owner: o.owner } : {}),
              ...(cursor ? { cursor } : {}),
            }),
          o.limit,
        );
        ctx.print(cmd, { agents }, (r) => formatListings(r.agents));
      });
    });

  agentCmd
    .command('show <agentId>')
    .description('an agent’s card, status and presence')
    .action(async (id: string, _o, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        ctx.print(cmd, await agent.directory.getAgent(id), formatAgent);
      });
    });

  agentCmd
    .command('rotate <agentId>')
    .description('new creds for an agent; the old ones stop working and their connections close')
    .requiredOption('--out <file>', 'where to write the new creds file (mode 0600; never overwritten)')
    .action(async (id: string, o: { out: string }, cmd: Command) => {
      const out = assertWritable(o.out);
      await ctx.withAgent(cmd, async (agent) => {
        const c = await agent.call(governanceApi.rotateCredentials, { participant: id });
        await writeCredsFile(out, c.creds);
        ctx.print(
          cmd,
          { id, creds: out, userPublicKey: c.userPublicKey },
          () => `${id}: new creds written to ${out} (0600); the old ones are revoked`,
        );
      });
    });

  agentCmd
    .command('revoke <agentId>')
    .description('revoke an agent for good: its connections close and it cannot connect again')
    .option('--reason <text>', 'why', 'revoked by its owner')
    .action(async (id: string, o: { reason: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(governanceApi.revokeCredentials, { participant: id, reason: o.reason });
        ctx.print(
          cmd,
          { id, ...r },
          (v) => `${id}: revoked (${v.revoked} credential${v.revoked === 1 ? '' : 's'})`,
        );
      });
    });

  agentCmd
    .command('deregister <agentId>')
    .description('remove an agent: its card, inbox and credentials go with it')
    .action(async (id: string, _o, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(registryApi.deregisterAgent, { agent: id });
        ctx.print(cmd, { id: r.agent }, () => `${id}: deregistered`);
      });
    });

  agentCmd
    .command('import-a2a <cardUrl>')
    .description(
      'import an external A2A agent from its card: registered as an agent of runtime a2a that the gateway proxies (discoverable, invitable)',
    )
    .requiredOption('--owner <usrId>', 'the human who owns it')
    .option(
      '--auth <bearer:ref>',
      'how the gateway authenticates to it: bearer:<ref> reads the gateway env PARLEY_A2A_SECRET_<REF>',
    )
    .action(async (cardUrl: string, o: { owner: string; auth?: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(a2aApi.importA2a, {
          cardUrl,
          owner: o.owner,
          ...(o.auth ? { auth: o.auth } : {}),
        });
        ctx.print(
          cmd,
          r,
          (v) =>
            `${v.agent} (${v.name}): imported from ${cardUrl}${v.signed ? ', signature verified' : ', unsigned card'}${v.streaming ? ', streaming' : ''}`,
        );
      });
    });
}
