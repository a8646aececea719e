import { type ApiKeyScope, gatewayApi } from '@parley/contracts';
import type { Command } from 'commander';
import type { CliContext } from '../context.js';

const scopesOf = (v: string): ApiKeyScope[] =>
  v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean) as ApiKeyScope[];

/** `--expires 30d` (days) → a whole number of days. */
function days(v: string): number {
  const m = /^(\d+)d?$/.exec(v.trim());
  if (!m) throw new Error(`--expires takes a number of days, e.g. 90d (got ${v})`);
  return Number(m[1]);
}

/**
 * `parley key create|list|revoke` (API keys of the HTTP gateway, one agent each) and
 * `parley hook create|list|rotate-secret|delete` (inbound webhooks of a bridge agent), and
 * `parley webhook set|show|delete|replay` (an agent's inbox delivered as signed POSTs).
 */
export function registerGatewayCommands(program: Command, ctx: CliContext): void {
  const key = program
    .command('key')
    .description('API keys of the HTTP gateway: each acts as exactly one agent');
  key
    .command('create')
    .description(
      'mint an API key for an agent (the agent, its owner or an org admin); printed once, stored hashed',
    )
    .requiredOption('--for <agentId>', 'the agent the key acts as (agt_…)')
    .option('--scopes <list>', 'read, write (comma-separated)', 'read,write')
    .option('--expires <days>', 'lifetime, e.g. 90d (default: no expiry)')
    .option('--label <text>', 'what the key is for', '')
    .action(async (o: { for: string; scopes: string; expires?: string; label: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(gatewayApi.createKey, {
          agent: o.for,
          label: o.label,
          scopes: scopesOf(o.scopes),
          ...(o.expires ? { ttlDays: days(o.expires) } : {}),
        });
        ctx.print(
          cmd,
          r,
          (v) =>
            `${v.key}\n(shown once) ${v.info.id} acts as ${v.info.agent}, scopes ${v.info.scopes.join(',')}${
              v.info.expiresAt ? `, expires ${v.info.expiresAt}` : ''
            }\nuse it as: Authorization: Bearer <key>`,
        );
      });
    });
  key
    .command('list')
    .description('the API keys of an agent (never their secrets)')
    .requiredOption('--for <agentId>', 'the agent (agt_…)')
    .action(async (o: { for: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(gatewayApi.listKeys, { agent: o.for });
        ctx.print(cmd, r, (v) =>
          v.keys.length
            ? v.keys
                .map(
                  (k) =>
                    `${k.id}  ${k.scopes.join(',')}  ${k.revokedAt ? `revoked ${k.revokedAt}` : k.expiresAt ? `expires ${k.expiresAt}` : 'active'}  ${k.label}`,
                )
                .join('\n')
            : 'no keys',
        );
      });
    });
  key
    .command('revoke <keyId>')
    .description('revoke an API key at once')
    .action(async (id: string, _o: unknown, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(gatewayApi.revokeKey, { id });
        ctx.print(cmd, r, (v) => (v.revoked ? `${v.id} revoked` : `${v.id} was already revoked`));
      });
    });

  const hook = program.command('hook').description('inbound webhooks: POST /v1/hooks/<id> becomes a message');
  hook
    .command('create')
    .description(
      'a hook for a bridge agent into a room (or to one participant); prints the signing secret once',
    )
    .requiredOption('--agent <agentId>', 'the bridge agent the hook speaks as')
    .option('--room <roomId>', 'the room it posts to')
    .option('--to <participantId>', 'or: one participant (their direct room with the agent)')
    .option('--template <text>', 'message text; {{a.b}} is that field of the JSON body')
    .option('--no-data', 'do not attach the JSON body as a data part')
    .option('--label <text>', 'what the hook is for', '')
    .action(
      async (
        o: { agent: string; room?: string; to?: string; template?: string; data: boolean; label: string },
        cmd: Command,
      ) => {
        await ctx.withAgent(cmd, async (agent) => {
          const r = await agent.call(gatewayApi.createHook, {
            agent: o.agent,
            ...(o.room ? { room: o.room } : {}),
            ...(o.to ? { participant: o.to } : {}),
            ...(o.template !== undefined ? { template: o.template } : {}),
            includeData: o.data,
            label: o.label,
          });
          ctx.print(
            cmd,
            r,
            (v) =>
              `${v.info.id}  POST ${v.path}  → ${v.info.room}\nsecret (shown once): ${v.secret}\nsign with Standard Webhooks, or use the secret as a GitHub webhook secret`,
          );
        });
      },
    );
  hook
    .command('list')
    .description('the hooks of a bridge agent')
    .requiredOption('--agent <agentId>', 'the bridge agent')
    .action(async (o: { agent: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(gatewayApi.listHooks, { agent: o.agent });
        ctx.print(cmd, r, (v) =>
          v.hooks.length ? v.hooks.map((h) => `${h.id}  → ${h.room}  ${h.label}`).join('\n') : 'no hooks',
        );
      });
    });
  hook
    .command('rotate-secret <hookId>')
    .description('a new signing secret; the old one stops verifying at once')
    .action(async (id: string, _o: unknown, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(gatewayApi.rotateHookSecret, { id });
        ctx.print(cmd, r, (v) => `${v.info.id}\nsecret (shown once): ${v.secret}`);
      });
    });
  hook
    .command('delete <hookId>')
    .description('delete a hook')
    .action(async (id: string, _o: unknown, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(gatewayApi.deleteHook, { id });
        ctx.print(cmd, r, (v) => (v.deleted ? `${v.id} deleted` : `${v.id} did not exist`));
      });
    });

  const webhook = program
    .command('webhook')
    .description('outbound webhooks: an agent’s inbox delivered as signed HTTP POSTs');
  webhook
    .command('set')
    .description('deliver an agent’s inbox to a URL (Standard Webhooks signatures); prints the secret once')
    .requiredOption('--agent <agentId>', 'the agent')
    .requiredOption('--url <url>', 'where to POST')
    .option(
      '--max-attempts <n>',
      'tries before a delivery is dead-lettered',
      (v) => Number.parseInt(v, 10),
      8,
    )
    .action(async (o: { agent: string; url: string; maxAttempts: number }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(gatewayApi.setWebhook, {
          agent: o.agent,
          url: o.url,
          maxAttempts: o.maxAttempts,
        });
        ctx.print(cmd, r, (v) => `${v.info.agent} → ${v.info.url}\nsecret (shown once): ${v.secret}`);
      });
    });
  webhook
    .command('show')
    .description('an agent’s outbound webhook and its dead letters')
    .requiredOption('--agent <agentId>', 'the agent')
    .action(async (o: { agent: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(gatewayApi.getWebhook, { agent: o.agent });
        ctx.print(
          cmd,
          r,
          (v) =>
            `${v.info.agent} → ${v.info.url} (up to ${v.info.maxAttempts} tries)\n${v.deadLetters
              .map((d) => `dead letter ${d.room}:${d.roomSeq} after ${d.attempts} tries: ${d.lastError}`)
              .join('\n')}`,
        );
      });
    });
  webhook
    .command('delete')
    .description('stop delivering an agent’s inbox to its URL')
    .requiredOption('--agent <agentId>', 'the agent')
    .action(async (o: { agent: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(gatewayApi.deleteWebhook, { agent: o.agent });
        ctx.print(cmd, r, (v) => (v.deleted ? 'deleted' : 'there was none'));
      });
    });
  webhook
    .command('replay')
    .description('POST a room’s messages after a position to the agent’s webhook again')
    .requiredOption('--agent <agentId>', 'the agent')
    .requiredOption('--room <roomId>', 'the room')
    .option('--after <seq>', 'room position to replay after', (v) => Number.parseInt(v, 10), 0)
    .action(async (o: { agent: string; room: string; after: number }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(gatewayApi.replayWebhook, {
          agent: o.agent,
          room: o.room,
          after: o.after,
        });
        ctx.print(cmd, r, (v) => `${v.delivered} delivered again`);
      });
    });
}
