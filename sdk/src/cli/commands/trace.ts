import { ParleyError } from '@parley/contracts';
import type { Command } from 'commander';
import type { CliContext } from '../context.js';

/** `parley trace <msgId> --room <room>`: the trace of a message, and its Jaeger link. */
export function registerTraceCommands(program: Command, ctx: CliContext): void {
  program
    .command('trace <messageId>')
    .description('print the trace id of a message (and its Jaeger link when PARLEY_JAEGER_URL is set)')
    .requiredOption('--room <roomId>', 'the room the message is in (you must be a member)')
    .action(async (messageId: string, o: { room: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const room = agent.rooms.room(o.room);
        let before: number | undefined;
        for (;;) {
          const page = await room.history({ limit: 200, ...(before ? { before } : {}) });
          const hit = page.entries.find((e) => e.message.id === messageId);
          if (hit) {
            const traceId = hit.message.trace?.traceparent.split('-')[1];
            if (!traceId)
              throw new ParleyError('NOT_FOUND', `message ${messageId} was sent without trace context`);
            const jaeger = ctx.env.PARLEY_JAEGER_URL?.replace(/\/$/, '');
            const result = {
              messageId,
              room: o.room,
              roomSeq: hit.seq,
              traceId,
              ...(jaeger ? { jaeger: `${jaeger}/trace/${traceId}` } : {}),
            };
            ctx.print(cmd, result, (r) =>
              [`trace ${r.traceId}  (#${r.roomSeq} in ${r.room})`, ...(r.jaeger ? [r.jaeger] : [])].join(
                '\n',
              ),
            );
            return;
          }
          if (!page.more || page.entries.length === 0) break;
          before = page.entries.at(-1)?.seq;
        }
        throw new ParleyError('NOT_FOUND', `no message ${messageId} in room ${o.room}`);
      });
    });
}
