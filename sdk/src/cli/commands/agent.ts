import { readFile } from 'node:fs/promises';
import {
  type AgentCardInput,
  a2aApi,
  governanceApi,
  isParleyError,
  ParleyError,
  RuntimeKind,
  registryApi,
  Visibility,
} from '@parley/contracts';
import { type Command, Option } from 'commander';
import type { CliContext } from '../context.js';
import { assertWritable, writeCredsFile } from '../creds-file.js';
import { formatAgent, formatAgentCard, formatListings } from './listing.js';

interface CardOptions {
  skill?: string[];
  scope?: string[];
  tool?: string[];
  runtime?: AgentCardInput['runtime'];
  visibility?: AgentCardInput['visibility'];
  description?: string;
}

interface CreateOptions extends CardOptions {
  owner?: string;
  card?: string;
  out: string;
}

interface UpdateOptions extends CardOptions {
  name?: string;
  card?: string;
  removeSkill?: string[];
  removeScope?: string[];
  removeTool?: string[];
}

const union = (a: unknown, add: string[] = [], remove: string[] = []): string[] => {
  const base = Array.isArray(a) ? a.filter((x): x is string => typeof x === 'string') : [];
  return [...new Set([...base, ...add])].filter((x) => !remove.includes(x));
};

/** Applies the card flags to a card (JSON from --card, or the registered card). */
function applyCardOptions(card: Record<string, unknown>, o: CardOptions & Partial<UpdateOptions>): void {
  if (o.name !== undefined) card.name = o.name;
  if (o.description !== undefined) card.description = o.description;
  if (o.runtime) card.runtime = o.runtime;
  if (o.visibility) card.visibility = o.visibility;
  if (o.skill?.length || o.removeSkill?.length) {
    const existing = Array.isArray(card.skills) ? (card.skills as { id?: unknown }[]) : [];
    const ids = new Set(existing.map((s) => s.id));
    card.skills = [
      ...existing.filter((s) => !o.removeSkill?.includes(String(s.id))),
      ...(o.skill ?? []).filter((id) => !ids.has(id)).map((id) => ({ id, name: id })),
    ];
  }
  if (o.scope?.length || o.removeScope?.length) card.scopes = union(card.scopes, o.scope, o.removeScope);
  if (o.tool?.length || o.removeTool?.length) card.tools = union(card.tools, o.tool, o.removeTool);
}

/** The card flags `agent create` and `agent update` share. */
function cardFlags(cmd: Command, verb: 'offers' | 'adds'): Command {
  return cmd
    .option('--skill <id...>', `skill ids it ${verb === 'offers' ? 'offers' : 'adds'} (repeatable)`)
    .option(
      '--scope <scope...>',
      `scopes its card lists (${verb === 'offers' ? 'what it may be delegated' : 'added'}), e.g. 'tickets:*'`,
    )
    .option('--tool <name...>', `tools it declares${verb === 'adds' ? ' (added)' : ''}`)
    .addOption(new Option('--runtime <kind>', 'the runtime it runs in').choices(RuntimeKind.options))
    .addOption(new Option('--visibility <v>', 'who may find it').choices(Visibility.options))
    .option('--description <text>', 'what it does');
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

/** `parley agent create|list|show|update|rotate|revoke|deregister`. */
export function registerAgentCommands(program: Command, ctx: CliContext): void {
  const agentCmd = program.command('agent').description('agents: onboarding, inventory, credentials');

  cardFlags(
    agentCmd
      .command('create <name>')
      .description(
        'register an agent, create its inbox and write its creds, once: then connect({ creds }) just works',
      )
      .requiredOption('--out <file>', 'where to write the creds file (mode 0600; never overwritten)')
      .option('--owner <usrId>', 'the human who owns it (default: you; an admin may name someone in the org)')
      .option('--card <file>', 'an agent card (JSON, A2A-compatible plus runtime/tools/scopes/visibility)'),
    'offers',
  ).action(async (name: string, o: CreateOptions, cmd: Command) => {
    const out = assertWritable(o.out);
    const card: Record<string, unknown> = o.card ? await readCard(o.card) : {};
    applyCardOptions(card, { ...o, name });
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

  cardFlags(
    agentCmd
      .command('update <agentId>')
      .description(
        'change an agent’s card (its owner): name, description, skills, scopes, tools, runtime, visibility',
      )
      .option('--name <name>', 'a new name')
      .option('--card <file>', 'replace the whole card with this one (JSON); other flags apply on top')
      .option('--remove-skill <id...>', 'skill ids to take off')
      .option('--remove-scope <scope...>', 'scopes to take off')
      .option('--remove-tool <name...>', 'tools to take off'),
    'adds',
  ).action(async (id: string, o: UpdateOptions, cmd: Command) => {
    const replacement = o.card ? await readCard(o.card) : undefined;
    await ctx.withAgent(cmd, async (agent) => {
      // Compare-and-set on the revision: a concurrent change is read again and the flags re-applied.
      for (let attempt = 0; ; attempt++) {
        const { agent: current } = await agent.directory.getAgent(id);
        const card: Record<string, unknown> = structuredClone(replacement ?? current.card);
        if (replacement && card.name === undefined) card.name = current.card.name;
        applyCardOptions(card, o);
        try {
          const updated = await agent.call(registryApi.updateAgent, {
            agent: id,
            revision: current.revision,
            card: card as AgentCardInput,
          });
          ctx.print(cmd, updated, (a) => `card updated:\n${formatAgentCard(a)}`);
          return;
        } catch (err) {
          if (attempt < 3 && isParleyError(err, 'CONFLICT')) continue;
          throw err;
        }
      }
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
