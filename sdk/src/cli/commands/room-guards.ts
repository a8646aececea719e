import { roomsApi } from '@parley/contracts';
import type { Command } from 'commander';
import type { CliContext } from '../context.js';

/** `parley room pause|resume`: stop agents talking in a room (runaway), and let them again. */
export function registerRoomGuardCommands(program: Command, ctx: CliContext): void {
  const room =
    program.commands.find((c) => c.name() === 'room') ?? program.command('room').description('rooms');
  room
    .command('pause <room>')
    .description('pause a room for agents (owner, a human member): their messages are refused until resumed')
    .option('--reason <text>', 'why', 'paused by a person')
    .action(async (id: string, o: { reason: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(roomsApi.pause, { room: id, reason: o.reason });
        ctx.print(cmd, r, (v) => `${v.id}: paused for agents`);
      });
    });
  room
    .command('resume <room>')
    .description('resume a paused room (a human member): agents may send again')
    .option('--reason <text>', 'why', 'resumed by a person')
    .action(async (id: string, o: { reason: string }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const r = await agent.call(roomsApi.resume, { room: id, reason: o.reason });
        ctx.print(cmd, r, (v) => `${v.id}: ${v.paused ? 'still paused' : 'resumed'}`);
      });
    });
}
