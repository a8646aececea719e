/**
 * The backbone of `pnpm bench:scale`, in a process of its own so that its memory and CPU are the
 * services' alone: the standalone backbone (`nodes` 1: nats-server as its child) or the services on
 * the harness's 3-node JetStream cluster (R3 streams and buckets, R1 inbox consumers). Sends
 * `{ type: 'ready', … }` over IPC once healthy; `{ type: 'stop' }` stops everything and exits.
 */
import { readFile } from 'node:fs/promises';
import { startParley } from '../harness/index.js';

const nodes = process.argv.includes('--cluster') ? 3 : 1;
const parley = await startParley({ nodes });
const send = (m: unknown) => process.send?.(m);
send({
  type: 'ready',
  servers: parley.natsUrl.split(','),
  adminCreds: await readFile(parley.home.paths.adminCreds, 'utf8'),
  serviceCreds: await parley.serviceCreds('scalebench'),
  nodes,
});
let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await parley.destroy().catch(() => undefined);
  process.exit(0);
};
process.on('message', (m: { type?: string }) => {
  if (m?.type === 'stop') void stop();
});
// The bench that started this process died: do not outlive it.
process.on('disconnect', () => void stop());
process.on('SIGTERM', () => void stop());
