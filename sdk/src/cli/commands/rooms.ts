import { readFile } from 'node:fs/promises';
import {
  type HistoryEntry,
  limits,
  ParleyError,
  type Part,
  type Room,
  type RoomMessage,
} from '@parley/contracts';
import { type Command, InvalidArgumentError, Option } from 'commander';
import type { Delivery } from '../../delivery.js';
import type { CliContext } from '../context.js';

const positiveInt = (flag: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`${flag} must be a positive integer`);
  return n;
};
const collect = (v: string, acc: string[]) => [...acc, v];

/**
 * The text `parley send` sends: the words, stdin (`-`) or a file. Refused before anything is sent
 * when empty or larger than a message may be (the protocol's default limits; a text part holds at
 * most {@link limits.maxTextChars} characters, a message {@link limits.maxMessageBytes} bytes).
 */
async function messageText(words: string[], file: string | undefined, ctx: CliContext): Promise<string> {
  let text: string;
  let source: string;
  if (file !== undefined) {
    if (words.length)
      throw new ParleyError('INVALID_ARGUMENT', 'give the text as words, - (stdin) or --file, not both');
    try {
      text = await readFile(file, 'utf8');
    } catch (err) {
      throw new ParleyError('INVALID_ARGUMENT', `cannot read ${file}: ${(err as Error).message}`);
    }
    source = file;
  } else if (words.length === 1 && words[0] === '-') {
    text = await (ctx.io.readStdin ?? readProcessStdin)();
    source = 'stdin';
  } else {
    text = words.join(' ');
    source = 'the text';
  }
  if (text.trim() === '')
    throw new ParleyError(
      'INVALID_ARGUMENT',
      `${source === 'the text' ? 'no text given' : `${source} is empty`}: give words, - (stdin) or --file <path>`,
    );
  const bytes = Buffer.byteLength(text, 'utf8');
  if (text.length > limits.maxTextChars || bytes > limits.maxMessageBytes) {
    throw new ParleyError(
      'PAYLOAD_TOO_LARGE',
      `${source} is ${text.length} characters (${bytes} bytes); a message holds at most ${limits.maxTextChars} characters of text and ${limits.maxMessageBytes} bytes: split it into several messages`,
      {
        details: {
          size: bytes,
          chars: text.length,
          limit: limits.maxMessageBytes,
          maxTextChars: limits.maxTextChars,
        },
      },
    );
  }
  return text;
}

async function readProcessStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** One line of text for a part. */
function partText(p: Part): string {
  if (p.type === 'text') return p.text;
  if (p.type === 'data') return JSON.stringify(p.data);
  return `[file ${p.name}${p.url ? ` ${p.url}` : ''}]`;
}

const CHANGES: Record<string, string> = {
  joined: 'joined',
  left: 'left',
  removed: 'was removed',
  updated: 'changed role or delivery filter',
  created: 'created the room',
  closed: 'closed the room',
  paused: 'paused the room for agents',
  resumed: 'resumed the room',
};

/** A room event (membership or room change) in words, e.g. `usr_… joined (member)`. */
function describeEvent(m: RoomMessage): string {
  const data = m.parts.find((p) => p.type === 'data')?.data ?? {};
  const change = CHANGES[String(data.change)] ?? String(data.change);
  if (m.kind === 'membership') return `${String(data.member)} ${change} (${String(data.role)})`;
  return `${change}${data.title ? ` "${String(data.title)}"` : ''}`;
}

/** How a message is printed: `[room] #seq sender [for principal] (kind): text`. */
export function formatMessage(seq: number, m: RoomMessage, showRoom = true): string {
  const where = `${showRoom ? `[${m.room}] ` : ''}#${seq}`;
  if (m.kind === 'membership' || m.kind === 'room') return `${where} ${m.sender.id} · ${describeEvent(m)}`;
  const kind = m.kind === 'message' ? '' : ` (${m.kind})`;
  // "A, acting for alice": the delegation the ingress verified.
  const onBehalf = m.onBehalfOf ? ` for ${m.onBehalfOf.principal}` : '';
  return `${where} ${m.sender.id}${onBehalf}${kind}: ${m.parts.map(partText).join(' ')}`;
}

function formatRoom(r: Room): string {
  const lines = [`${r.id}  ${r.title}${r.closed ? '  (closed)' : ''}  owner ${r.owner}`];
  for (const m of r.members)
    lines.push(`  ${m.id}  ${m.role}${m.delivery === 'mentions' ? '  mentions only' : ''}`);
  return lines.join('\n');
}

/** `parley room …`, `parley send`, `parley tail`, `parley history`. */
export function registerRoomCommands(program: Command, ctx: CliContext): void {
  const room = program.command('room').description('create rooms, invite participants, list and close them');

  room
    .command('create <title>')
    .description('create a room owned by you')
    .option('--member <participantId>', 'invite a participant (repeatable)', collect, [])
    .option('--direct', 'a direct room with exactly one other member')
    .action(async (title: string, o: { member: string[]; direct?: boolean }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const { room: r } = await agent.rooms.create(title, { members: o.member, direct: o.direct ?? false });
        ctx.print(cmd, r, formatRoom);
      });
    });

  room
    .command('invite <room> <participant>')
    .description('add a participant to a room')
    .addOption(
      new Option('--role <role>', 'member or observer').choices(['member', 'observer']).default('member'),
    )
    .option('--mentions-only', 'deliver only messages that mention it')
    .action(
      async (
        roomId: string,
        participant: string,
        o: { role: 'member' | 'observer'; mentionsOnly?: boolean },
        cmd: Command,
      ) => {
        await ctx.withAgent(cmd, async (agent) => {
          const m = await agent.rooms.invite(roomId, participant, {
            role: o.role,
            delivery: o.mentionsOnly ? 'mentions' : 'all',
          });
          ctx.print(cmd, m, (x) => `${x.id} joined ${roomId} as ${x.role} (#${x.joinedSeq})`);
        });
      },
    );

  room
    .command('list')
    .description('the rooms you are a member of')
    .option('--all', 'include closed rooms')
    .action(async (o: { all?: boolean }, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => {
        const rooms = await agent.rooms.list({ includeClosed: o.all ?? false });
        ctx.print(cmd, rooms, (rs) =>
          rs.length === 0
            ? '(no rooms)'
            : rs
                .map(
                  (r) =>
                    `${r.id}  ${r.title}  ${r.role}  ${r.memberCount} members${r.closed ? '  closed' : ''}`,
                )
                .join('\n'),
        );
      });
    });

  room
    .command('show <room>')
    .description('a room and its members')
    .action(async (roomId: string, _o, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) => ctx.print(cmd, await agent.rooms.get(roomId), formatRoom));
    });

  room
    .command('leave <room>')
    .description('leave a room')
    .action(async (roomId: string, _o, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) =>
        ctx.print(cmd, await agent.rooms.leave(roomId), (r) => `left ${r.room} (#${r.seq})`),
      );
    });

  room
    .command('close <room>')
    .description('close a room you own: no more messages or invites; history stays')
    .action(async (roomId: string, _o, cmd: Command) => {
      await ctx.withAgent(cmd, async (agent) =>
        ctx.print(cmd, await agent.rooms.room(roomId).close(), formatRoom),
      );
    });

  program
    .command('send <room> [text...]')
    .description(
      'send a message to a room; prints its id and position. The text: the words given, - for stdin, or --file',
    )
    .option('--file <path>', 'send the text of this file (UTF-8)')
    .option('--mention <participantId>', 'mention a participant (repeatable)', collect, [])
    .option('--reply-to <messageId>', 'the message this answers')
    .action(
      async (
        roomId: string,
        words: string[],
        o: { mention: string[]; replyTo?: string; file?: string },
        cmd: Command,
      ) => {
        const text = await messageText(words, o.file, ctx);
        await ctx.withAgent(cmd, async (agent) => {
          const reply = await agent.rooms.room(roomId).send(text, {
            mentions: o.mention,
            ...(o.replyTo ? { replyTo: o.replyTo } : {}),
          });
          ctx.print(cmd, reply, (r) => `${r.id} #${r.roomSeq}${r.duplicate ? ' (already sent)' : ''}`);
        });
      },
    );

  program
    .command('history <room>')
    .description('a page of a room’s messages, newest first (or --oldest)')
    .option('--limit <n>', 'how many', positiveInt('--limit'), 20)
    .option('--oldest', 'oldest first')
    .option('--before <seq>', 'only entries before this position', positiveInt('--before'))
    .option('--after <seq>', 'only entries after this position', positiveInt('--after'))
    .action(
      async (
        roomId: string,
        o: { limit: number; oldest?: boolean; before?: number; after?: number },
        cmd: Command,
      ) => {
        await ctx.withAgent(cmd, async (agent) => {
          const page = await agent.rooms.room(roomId).history({
            order: o.oldest ? 'oldest' : 'newest',
            limit: o.limit,
            ...(o.before ? { before: o.before } : {}),
            ...(o.after ? { after: o.after } : {}),
          });
          ctx.print(
            cmd,
            page,
            (p) =>
              [
                ...p.entries.map((e: HistoryEntry) => formatMessage(e.seq, e.message, false)),
                ...(p.more ? ['…'] : []),
              ].join('\n') || '(no messages)',
          );
        });
      },
    );

  program
    .command('tail')
    .description('print your deliveries live, in order, as they arrive (this consumes your inbox)')
    .option('--count <n>', 'exit after n messages', positiveInt('--count'))
    .option('--own', 'also print your own messages')
    .action(async (o: { count?: number; own?: boolean }, cmd: Command) => {
      await ctx.withAgent(
        cmd,
        async (agent) => {
          let seen = 0;
          let finish!: () => void;
          const finished = new Promise<void>((r) => {
            finish = r;
          });
          const json = cmd.optsWithGlobals<{ json?: boolean }>().json;
          const print = (d: Delivery) => {
            ctx.io.out(
              json
                ? JSON.stringify({ roomSeq: d.roomSeq, ...d.message })
                : formatMessage(d.roomSeq, d.message),
            );
            if (o.count !== undefined && ++seen >= o.count) finish();
          };
          agent
            .on('message', print)
            .on('room_event', print)
            .on('dead_letter', print)
            .on('contact_request', print)
            .on('contact_update', print);
          await agent.listening;
          const stop = () => finish();
          process.once('SIGINT', stop);
          process.once('SIGTERM', stop);
          await finished;
          process.off('SIGINT', stop);
          process.off('SIGTERM', stop);
        },
        { delivery: { includeOwn: o.own ?? false } },
      );
    });
}
