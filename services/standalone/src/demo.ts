/**
 * The scripted demo `npm start` runs: a planner and a reviewer — two agents with their own minted
 * creds — meet in a room (the local admin is a member, so `npx parley tail` shows it) and exchange a
 * short review of a plan, with a structured handoff.
 */
import { chmod, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { JetStreamManager } from '@nats-io/jetstream';
import { newId } from '@parley/contracts';
import { mintParticipantCreds, publicKeys } from '@parley/governance';
import { ensureInboxConsumer } from '@parley/kit';
import { type Agent, connect, type Delivery } from '@parley/sdk';
import * as z from 'zod';
import type { Home } from './home.js';

const DemoState = z.object({ planner: z.string(), reviewer: z.string() });

/** A running demo. */
export interface Demo {
  room: string;
  /** Resolves when the scripted conversation is over. */
  finished: Promise<void>;
  stop(): Promise<void>;
}

function text(d: Delivery): string {
  return d.message.parts.map((p) => (p.type === 'text' ? p.text : '')).join(' ');
}

async function demoAgent(
  home: Home,
  jsm: JetStreamManager,
  name: 'planner' | 'reviewer',
  id: string,
): Promise<string> {
  await ensureInboxConsumer(jsm, id);
  const path = join(home.paths.credsDir, `${name}.creds`);
  const existing = await readFile(path, 'utf8').catch(() => undefined);
  if (existing) return path;
  const { creds } = await mintParticipantCreds(
    home.keys.participantSigningSeed,
    publicKeys(home.keys).account,
    id,
  );
  await writeFile(path, creds, { mode: 0o600 });
  await chmod(path, 0o600);
  return path;
}

/** Starts the demo conversation; `out` receives one line per step. */
export async function startDemo(o: {
  natsUrl: string;
  home: Home;
  jsm: JetStreamManager;
  out: (line: string) => void;
}): Promise<Demo> {
  const statePath = join(o.home.paths.home, 'demo.json');
  const saved = await readFile(statePath, 'utf8').then(
    (t) => DemoState.parse(JSON.parse(t)),
    () => undefined,
  );
  const ids = saved ?? { planner: newId('agent'), reviewer: newId('agent') };
  if (!saved) await writeFile(statePath, `${JSON.stringify(ids, null, 2)}\n`);
  const plannerCreds = await demoAgent(o.home, o.jsm, 'planner', ids.planner);
  const reviewerCreds = await demoAgent(o.home, o.jsm, 'reviewer', ids.reviewer);
  const planner: Agent = await connect({ servers: o.natsUrl, creds: plannerCreds });
  const reviewer: Agent = await connect({ servers: o.natsUrl, creds: reviewerCreds });
  let done!: () => void;
  const finished = new Promise<void>((r) => {
    done = r;
  });

  reviewer.on('message', async (d) => {
    // Only the plan itself gets a review: a reviewer that answered every message would loop forever.
    if (d.message.sender.id !== ids.planner || !text(d).startsWith('Plan:')) return;
    const room = reviewer.rooms.room(d.room);
    await room.send(
      'Review: the rollout order is right, but step 2 has no rollback. Add a feature flag and a canary at 5% before 50%.',
      {
        mentions: [ids.planner],
        replyTo: d.message.id,
        handoff: {
          goal: 'Roll out the new billing service without downtime',
          done: ['Reviewed the 3-step plan'],
          triedAndRuledOut: ['Big-bang switch: no rollback path'],
          openQuestions: ['Who owns the canary dashboard?'],
          artifacts: [],
        },
      },
    );
  });
  planner.on('message', async (d) => {
    if (d.message.sender.id !== ids.reviewer) return;
    o.out(`demo  reviewer → planner: ${text(d)}`);
    await planner.rooms
      .room(d.room)
      .send('Thanks — adding the flag and the canary. Marking the plan ready.', {
        replyTo: d.message.id,
      });
    o.out('demo  planner → room: Thanks — adding the flag and the canary.');
    done();
  });
  await Promise.all([planner.listening, reviewer.listening]);

  const room = await planner.rooms.create('Review: billing rollout plan', {
    members: [ids.reviewer, o.home.state.admin.id],
  });
  o.out(`demo  planner (${ids.planner}) and reviewer (${ids.reviewer}) meet in ${room.id}`);
  await room.send(
    'Plan: 1) deploy billing-v2 next to v1, 2) switch traffic to v2, 3) remove v1 after a week. @reviewer please review.',
    { mentions: [ids.reviewer] },
  );
  o.out('demo  planner → room: Plan: deploy billing-v2, switch traffic, remove v1…');
  return {
    room: room.id,
    finished,
    async stop() {
      await Promise.allSettled([planner.close(), reviewer.close()]);
    },
  };
}
