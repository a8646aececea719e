import { isErrorCode, ParleyError, type Task, TaskState } from '@parley/contracts';
import type { Command } from 'commander';
import type { CliContext } from '../context.js';

function line(t: Task): string {
  const why = t.reason ? ` — ${t.code ? `${t.code}: ` : ''}${t.reason}` : '';
  return `${t.id}  ${t.state.padEnd(14)} ${t.assignee}  ${t.goal}${why}`;
}

/** The long form of `parley task show`: the task, its side effects, compensations and bindings. */
export function formatTask(t: Task): string {
  const out = [
    `${t.id}: ${t.goal}`,
    `  state       ${t.state}${t.reason ? ` — ${t.code ? `${t.code}: ` : ''}${t.reason}` : ''}`,
    `  room        ${t.room}`,
    `  requester   ${t.requester}`,
    `  assignee    ${t.assignee}`,
  ];
  if (t.parent) out.push(`  parent      ${t.parent}`);
  if (t.children.length) out.push(`  children    ${t.children.join(', ')}`);
  if (t.deadline) out.push(`  deadline    ${t.deadline}`);
  if (t.leaseUntil) out.push(`  lease until ${t.leaseUntil}`);
  if (t.budgetUsd !== undefined || t.costUsd > 0)
    out.push(`  cost        ${t.costUsd} USD${t.budgetUsd !== undefined ? ` of ${t.budgetUsd} USD` : ''}`);
  if (t.progress?.text || t.progress?.percent !== undefined)
    out.push(
      `  progress    ${t.progress.percent !== undefined ? `${t.progress.percent}% ` : ''}${t.progress.text ?? ''}`,
    );
  if (t.result) out.push(`  result      ${JSON.stringify(t.result)}`);
  out.push(`  side effects (${t.sideEffects.length})`);
  for (const e of t.sideEffects) {
    const comp = e.compensation
      ? `compensation ${e.compensation.state}${e.compensation.error ? ` (${e.compensation.error})` : ''}`
      : e.compensable
        ? 'compensable'
        : 'no compensation';
    out.push(`    ${e.key}  ${e.tool}  ${e.state}  ${comp}  by ${e.by} at ${e.at}`);
  }
  if (t.bindings.length) {
    out.push(`  runtimes (${t.bindings.length})`);
    for (const b of t.bindings) {
      const ids = Object.entries(b.ids)
        .map(([k, v]) => `${k}=${v}`)
        .join(' ');
      out.push(`    ${b.runtime}  ${b.id}  ${ids}  by ${b.participant}`);
    }
  }
  return out.join('\n');
}

/** `parley task create|list|show|cancel|…`: delegated work with a state, a deadline and a parent. */
export function registerTaskCommands(program: Command, ctx: CliContext): void {
  const task = program
    .command('task')
    .description('tasks: delegated work with a state, a deadline, an owner and a parent');
  task
    .command('create <room> <assignee> <goal>')
    .description('create a task in a room, assigned to a member of it')
    .option(
      '--deadline <duration|iso>',
      'when it fails with DEADLINE_EXCEEDED: e.g. 30s, 10m, 2h, or an ISO time',
    )
    .option('--parent <taskId>', 'the task this one is part of (you must be its assignee)')
    .option('--input <json>', 'inputs as a JSON object')
    .option('--accept <criterion...>', 'acceptance criteria')
    .option('--lease <duration>', 'how long the assignee may stay silent before you may reassign, e.g. 5m')
    .option('--budget <usd>', 'cost budget in USD: past it the task fails with BUDGET_EXCEEDED')
    .action(
      async (
        room: string,
        assignee: string,
        goal: string,
        o: {
          deadline?: string;
          parent?: string;
          input?: string;
          accept?: string[];
          lease?: string;
          budget?: string;
        },
        cmd: Command,
      ) => {
        await ctx.withAgent(cmd, async (agent) => {
          const t = await agent.tasks.create(room, {
            assignee,
            goal,
            ...(o.deadline ? { deadline: parseWhen(o.deadline) } : {}),
            ...(o.parent ? { parent: o.parent } : {}),
            ...(o.input ? { inputs: parseJson(o.input, '--input') } : {}),
            ...(o.accept ? { acceptance: o.accept } : {}),
            ...(o.lease ? { leaseMs: parseDuration(o.lease, '--lease') } : {}),
            ...(o.budget ? { budgetUsd: Number(o.budget) } : {}),
          });
          ctx.print(cmd, t, line);
        });
      },
    );
  task
    .command('list')
    .description('tasks you may see (requested by you, assigned to you, in your rooms), newest first')
    .option('--room <roomId>')
    .option('--assignee <id>')
    .option('--requester <id>')
    .option('--state <state...>', `any of ${TaskState.options.join(', ')}`)
    .option('--limit <n>', 'most tasks', '50')
    .action(
      async (
        o: { room?: string; assignee?: string; requester?: string; state?: string[]; limit: string },
        cmd: Command,
      ) => {
        await ctx.withAgent(cmd, async (agent) => {
          const tasks = await agent.tasks.list({
            ...(o.room ? { room: o.room } : {}),
            ...(o.assignee ? { assignee: o.assignee } : {}),
            ...(o.requester ? { requester: o.requester } : {}),
            ...(o.state ? { state: o.state.map((s) => TaskState.parse(s)) } : {}),
            limit: Number(o.limit),
          });
          ctx.print(cmd, tasks, (ts) => (ts.length ? ts.map(line).join('\n') : 'no tasks'));
        });
      },
    );
  task
    .command('show <taskId>')
    .description('a task with its side effects, their compensations and the runtimes bound to it')
    .action(async (id: string, _o: unknown, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        ctx.print(cmd, await agent.tasks.get(id), formatTask);
      });
    });
  const move = (name: string, to: TaskState, description: string, needsReason: boolean) =>
    task
      .command(`${name} <taskId>${needsReason ? ' <reason>' : ''}`)
      .description(description)
      .option('--code <code>', 'the error code of a failure (e.g. DEADLINE_EXCEEDED)')
      .option('--result <json>', 'the result as a JSON object (complete)')
      .action(async (id: string, ...rest: unknown[]) => {
        const cmd = rest.at(-1) as Command;
        const reason = needsReason ? (rest[0] as string) : undefined;
        const o = cmd.opts<{ code?: string; result?: string }>();
        if (o.code !== undefined && !isErrorCode(o.code))
          throw new ParleyError('INVALID_ARGUMENT', `--code: not a Parley error code: ${o.code}`);
        await ctx.withAgent(cmd, async (agent) => {
          const t =
            to === 'failed'
              ? await agent.tasks.fail(
                  id,
                  reason ?? 'failed',
                  o.code && isErrorCode(o.code) ? { code: o.code } : {},
                )
              : await agent.tasks.transition(id, to, {
                  ...(reason ? { reason } : {}),
                  ...(o.result ? { result: parseJson(o.result, '--result') } : {}),
                });
          ctx.print(cmd, t, line);
        });
      });
  move('start', 'working', 'start (or resume) a task assigned to you', false);
  move('input', 'input_required', 'say what you need before you can go on', true);
  move('complete', 'completed', 'complete a task assigned to you (optionally with --result)', false);
  move('fail', 'failed', 'fail a task assigned to you: the chain is told, children canceled', true);
  move('reject', 'rejected', 'decline a task assigned to you', true);
  move('cancel', 'canceled', 'cancel a task you requested (its open children too)', true);
  task
    .command('reassign <taskId> <assignee>')
    .description('give a task whose assignee was silent past its lease to another member of its room')
    .action(async (id: string, assignee: string, _o: unknown, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        ctx.print(cmd, await agent.tasks.reassign(id, assignee), line);
      });
    });
}

function parseJson(text: string, what: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new ParleyError('INVALID_ARGUMENT', `${what} is not JSON: ${text}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw new ParleyError('INVALID_ARGUMENT', `${what} must be a JSON object`);
  return v as Record<string, unknown>;
}

/** `30s`, `10m`, `2h`, `1d` or milliseconds. */
export function parseDuration(text: string, what: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(text.trim());
  if (!m) throw new ParleyError('INVALID_ARGUMENT', `${what}: not a duration (e.g. 30s, 10m, 2h): ${text}`);
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[(m[2] ?? 'ms') as 'ms'];
  return Math.round(Number(m[1]) * unit);
}

function parseWhen(text: string): number | string {
  if (/^\d{4}-\d{2}-\d{2}T/.test(text)) return text;
  return parseDuration(text, '--deadline');
}
