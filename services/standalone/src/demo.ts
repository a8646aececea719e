/**
 * The scripted demo `npm start` runs: a planner and a reviewer — two agents with their own minted
 * creds — meet in a room (the local admin is a member, so `npx parley tail` shows it) and exchange a
 * short review of a plan, with a structured handoff.
 */
import { chmod, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type AgentCardInput, registryApi } from '@parley/contracts';
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

const cards: Record<'planner' | 'reviewer', AgentCardInput> = {
  planner: {
    name: 'planner',
    description: 'Writes rollout plans and asks for reviews.',
    skills: [{ id: 'planning', name: 'Planning', tags: ['rollout', 'plans'] }],
    runtime: 'custom',
    visibility: 'org',
  },
  reviewer: {
    name: 'reviewer',
    description: 'Reviews plans and code; answers with a structured handoff.',
    skills: [{ id: 'code-review', name: 'Code review', tags: ['review', 'plans'] }],
    runtime: 'custom',
    visibility: 'org',
  },
};

/**
 * The demo agents are registered like any other (card, inbox, their own minted creds) by the local
 * admin, once; later starts reuse them.
 */
async function demoAgents(
  home: Home,
  admin: Agent,
): Promise<z.infer<typeof DemoState> & { creds: Record<'planner' | 'reviewer', string> }> {
  const statePath = join(home.paths.home, 'demo.json');
  const saved = await readFile(statePath, 'utf8').then(
    (t) => DemoState.parse(JSON.parse(t)),
    () => undefined,
  );
  const path = (name: string) => join(home.paths.credsDir, `${name}.creds`);
  if (saved) {
    const known = await Promise.all(
      (['planner', 'reviewer'] as const).map(
        async (name) =>
          (await readFile(path(name), 'utf8').catch(() => '')) !== '' &&
          (await admin.call(registryApi.getAgent, { agent: saved[name] }).then(
            () => true,
            () => false,
          )),
      ),
    );
    if (known.every(Boolean))
      return { ...saved, creds: { planner: path('planner'), reviewer: path('reviewer') } };
  }
  const ids = { planner: '', reviewer: '' };
  for (const name of ['planner', 'reviewer'] as const) {
    const created = await admin.call(registryApi.createAgent, { card: cards[name] });
    ids[name] = created.agent.id;
    await writeFile(path(name), created.credentials.creds, { mode: 0o600 });
    await chmod(path(name), 0o600);
  }
  await writeFile(statePath, `${JSON.stringify(ids, null, 2)}\n`);
  return { ...ids, creds: { planner: path('planner'), reviewer: path('reviewer') } };
}

/** Starts the demo conversation; `out` receives one line per step. */
export async function startDemo(o: {
  natsUrl: string;
  home: Home;
  out: (line: string) => void;
}): Promise<Demo> {
  const admin = await connect({ servers: o.natsUrl, creds: o.home.paths.adminCreds, presence: false });
  const ids = await demoAgents(o.home, admin).finally(() => admin.close());
  const planner: Agent = await connect({ servers: o.natsUrl, creds: ids.creds.planner });
  const reviewer: Agent = await connect({ servers: o.natsUrl, creds: ids.creds.reviewer });
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
