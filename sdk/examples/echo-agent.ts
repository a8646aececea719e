/**
 * A minimal Parley agent: answers every message that mentions it, in order, per room.
 *
 *   npx parley agent create echo --out echo.creds          # once (as the local admin)
 *   npx tsx sdk/examples/echo-agent.ts echo.creds         # then invite it into a room and @mention it
 *
 * NATS_URL picks the server (default nats://127.0.0.1:4222).
 */
import { connect, isParleyError } from '@parley/sdk';

const creds = process.argv[2];
if (!creds) {
  process.stderr.write('usage: echo-agent <file.creds>\n');
  process.exit(64);
}

const agent = await connect({
  servers: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
  creds,
  // Rooms are handled in parallel, each one strictly in order.
  delivery: { concurrency: 'per-room' },
});
await agent.presence.set('online', 'echoing mentions');

agent.on('message', async (d) => {
  if (!d.message.mentions.includes(agent.id)) return;
  const text = d.message.parts.map((p) => (p.type === 'text' ? p.text : '')).join(' ');
  // Sent while handling a delivery: causedBy and hop are set by the SDK. A throw here would make
  // Parley redeliver this message (in order) later.
  await agent.rooms
    .room(d.room)
    .send(`echo: ${text}`, { replyTo: d.message.id, mentions: [d.message.sender.id] });
});
agent.on('room_event', (d) => {
  const change = d.message.parts.find((p) => p.type === 'data')?.data;
  process.stdout.write(`${d.room} #${d.roomSeq}: ${JSON.stringify(change)}\n`);
});

await agent.listening;
process.stdout.write(`${agent.id} is listening\n`);

const stop = async () => {
  await agent.close().catch((err) => {
    if (!isParleyError(err)) throw err;
  });
  process.exit(0);
};
process.once('SIGINT', () => void stop());
process.once('SIGTERM', () => void stop());
