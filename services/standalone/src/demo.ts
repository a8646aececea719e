/**
 * The scripted demo `npm start` runs: a planner and a reviewer — two agents with their own minted
 * creds — meet in a room (the local admin is a member, so `npx parley tail` shows it) and exchange a
 * short review of a plan, with a structured handoff. Then consent: an auditor agent of another
 * owner (dana, a second person in the local org) finds the reviewer through discovery, is refused a
 * direct room (they are not contacts), asks for contact, is accepted by the reviewer and invited
 * into the room, where it speaks.
 */
import { chmod, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  type AgentCardInput,
  governanceApi,
  isParleyError,
  registryApi,
  type Tracer,
} from '@parley/contracts';
import { type Agent, connect, type Delivery } from '@parley/sdk';
import * as z from 'zod';
import { demoDelegation } from './demo-delegation.js';
import { runTaskDemo } from './demo-tasks.js';
import type { Home } from './home.js';

const DemoState = z.object({
  planner: z.string(),
  reviewer: z.string(),
  /** The auditor's owner and the auditor (absent in demo state written before consent existed). */
  dana: z.string().optional(),
  auditor: z.string().optional(),
});

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

const cards: Record<'planner' | 'reviewer' | 'auditor', AgentCardInput> = {
  planner: {
    name: 'planner',
    description: 'Writes rollout plans and asks for reviews.',
    skills: [{ id: 'planning', name: 'Planning', tags: ['rollout', 'plans'] }],
    runtime: 'custom',
    visibility: 'org',
    scopes: ['repo:read'],
  },
  reviewer: {
    name: 'reviewer',
    description: 'Reviews plans and code; answers with a structured handoff.',
    skills: [{ id: 'code-review', name: 'Code review', tags: ['review', 'plans'] }],
    runtime: 'custom',
    visibility: 'org',
    scopes: ['repo:read'],
  },
  auditor: {
    name: 'auditor',
    description: 'Audits rollout plans for secrets and permissions.',
    skills: [{ id: 'security-audit', name: 'Security audit', tags: ['security', 'plans'] }],
    runtime: 'custom',
    visibility: 'org',
  },
};

type DemoIds = z.infer<typeof DemoState> & {
  dana: string;
  auditor: string;
  creds: Record<'planner' | 'reviewer' | 'auditor', string>;
};

type DemoAgentName = 'planner' | 'reviewer' | 'auditor';

/** The card fields the demo's steps rely on (discovery by skill, visibility, delegated scopes). */
function cardFits(card: AgentCardInput, want: AgentCardInput): boolean {
  const ids = (c: AgentCardInput) =>
    (c.skills ?? [])
      .map((s) => s.id)
      .sort()
      .join(',');
  return (
    card.name === want.name &&
    (card.visibility ?? 'org') === (want.visibility ?? 'org') &&
    ids(card) === ids(want) &&
    (want.scopes ?? []).every((x) => card.scopes?.includes(x))
  );
}

/**
 * The demo agents are registered like any other (card, inbox, their own minted creds), once; later
 * starts reuse them. The planner and the reviewer belong to the local admin; the auditor to dana, a
 * second person the admin adds to the local org, so consent is needed between it and the others.
 *
 * Between two starts a person may do anything to them with the CLI — rotate or revoke their creds
 * (`parley connect … --name reviewer` rotates them), suspend, deregister, change their cards — so
 * each start checks what the demo needs and repairs it: an agent that is gone, revoked or suspended
 * is replaced by a new one, creds that no longer connect are rotated, a changed card is put back.
 */
async function demoAgents(
  home: Home,
  admin: Agent,
  natsUrl: string,
  out: (line: string) => void,
): Promise<DemoIds> {
  const statePath = join(home.paths.home, 'demo.json');
  const saved = await readFile(statePath, 'utf8').then(
    (t) => DemoState.partial().parse(JSON.parse(t)),
    () => undefined,
  );
  const path = (name: string) => join(home.paths.credsDir, `${name}.creds`);
  const creds = { planner: path('planner'), reviewer: path('reviewer'), auditor: path('auditor') };
  const write = async (name: string, content: string) => {
    await writeFile(path(name), content, { mode: 0o600 });
    await chmod(path(name), 0o600);
  };
  const connects = (file: string) =>
    connect({ servers: natsUrl, creds: file, presence: false }).then(
      (a) => a.close().then(() => true),
      () => false,
    );
  /** The saved agent when it still serves the demo (repaired), else a new one made by `owner`. */
  const ensure = async (name: DemoAgentName, owner: Agent, id: string | undefined): Promise<string> => {
    let found = id
      ? (
          await owner.call(registryApi.getAgent, { agent: id }).catch((err: unknown) => {
            if (isParleyError(err, 'NOT_FOUND')) return undefined;
            throw err;
          })
        )?.agent
      : undefined;
    if (found?.status === 'suspended') {
      await admin.call(governanceApi.resume, { agent: found.id, reason: 'the npm start demo runs it' });
      out(`demo  resumed the ${name} (${found.id}): it was suspended`);
    } else if (found?.status === 'revoked') {
      // Revoked for good: a new one takes its place (and its name).
      await owner.call(registryApi.deregisterAgent, { agent: found.id });
      out(`demo  the ${name} (${found.id}) was revoked: a new ${name} takes its place`);
      found = undefined;
    }
    if (found) {
      if (!cardFits(found.card, cards[name])) {
        await owner.call(registryApi.updateAgent, {
          agent: found.id,
          revision: found.revision,
          card: {
            ...found.card,
            ...cards[name],
            scopes: [...new Set([...found.card.scopes, ...(cards[name].scopes ?? [])])],
          },
        });
      }
      if (!(await connects(path(name)))) {
        await write(
          name,
          (await admin.call(governanceApi.rotateCredentials, { participant: found.id })).creds,
        );
        out(
          `demo  the ${name}'s creds no longer worked (rotated or revoked since): new ones are in ${path(name)}`,
        );
      }
      return found.id;
    }
    const created = await owner.call(registryApi.createAgent, { card: cards[name] }).catch((err: unknown) => {
      // Someone else in the org took the name: the demo's agent goes by another one.
      if (!isParleyError(err, 'CONFLICT')) throw err;
      return owner.call(registryApi.createAgent, {
        card: { ...cards[name], name: `${name}-${Date.now().toString(36)}` },
      });
    });
    await write(name, created.credentials.creds);
    return created.agent.id;
  };
  const planner = await ensure('planner', admin, saved?.planner);
  const reviewer = await ensure('reviewer', admin, saved?.reviewer);
  // dana acts through her own creds (saved at her creation); without working ones, a new dana.
  let dana = saved?.dana;
  let asDana =
    dana && (await connects(path('dana')))
      ? await connect({ servers: natsUrl, creds: path('dana'), presence: false })
      : undefined;
  if (!asDana) {
    const person = await admin.call(registryApi.createUser, {
      name: `dana-${Date.now().toString(36)}`,
      org: home.state.org.id,
    });
    dana = person.user.id;
    await write('dana', person.credentials.creds);
    asDana = await connect({ servers: natsUrl, creds: person.credentials.creds, presence: false });
  }
  let auditor: string;
  try {
    auditor = await ensure('auditor', asDana, saved?.dana === dana ? saved?.auditor : undefined);
  } finally {
    await asDana.close();
  }
  const state = { planner, reviewer, dana: dana as string, auditor };
  await writeFile(statePath, `${JSON.stringify(state, null, 2)}\n`);
  return { ...state, creds };
}

/** Starts the demo conversation; `out` receives one line per step. */
export async function startDemo(o: {
  natsUrl: string;
  home: Home;
  out: (line: string) => void;
  /** Each demo agent's tracer (its own service.name), when telemetry runs. */
  tracer?: (agent: string) => Tracer;
}): Promise<Demo> {
  const admin = await connect({ servers: o.natsUrl, creds: o.home.paths.adminCreds, presence: false });
  const ids = await demoAgents(o.home, admin, o.natsUrl, o.out).finally(() => admin.close());
  const governance = await demoDelegation({ natsUrl: o.natsUrl, home: o.home, ids, out: o.out });
  const as = (name: 'planner' | 'reviewer' | 'auditor') =>
    connect({ servers: o.natsUrl, creds: ids.creds[name], ...(o.tracer ? { tracer: o.tracer(name) } : {}) });
  const planner: Agent = await as('planner');
  const reviewer: Agent = await as('reviewer');
  const auditor: Agent = await as('auditor');
  // A block between the two since the last start (`parley contact block`) would stop the consent
  // step: lifted, and said so.
  for (const [side, name, other, otherName] of [
    [reviewer, 'reviewer', ids.auditor, 'auditor'],
    [auditor, 'auditor', ids.reviewer, 'reviewer'],
  ] as const) {
    if ((await side.contacts.list()).blocked.some((b) => b.participant === other)) {
      await side.contacts.unblock(other);
      o.out(`demo  the ${name} had blocked the ${otherName}: unblocked for the demo`);
    }
  }
  let reviewed!: () => void;
  const conversation = new Promise<void>((r) => {
    reviewed = r;
  });
  let audited!: () => void;
  const consentStep = new Promise<void>((r) => {
    audited = r;
  });
  let roomId = '';

  reviewer.on('message', async (d) => {
    // Only the plan itself gets a review: a reviewer that answered every message would loop forever.
    if (d.message.sender.id !== ids.planner || !text(d).startsWith('Plan:')) return;
    await governance.readForReview(reviewer, d.message);
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
  // The reviewer decides its contact requests (policy agent_decides): the auditor's is welcome.
  reviewer.on('contact_request', async (d) => {
    const r = d.contactRequest;
    if (!r || r.from !== ids.auditor || r.state !== 'pending') return;
    await reviewer.contacts.accept(r.id);
    o.out(`demo  reviewer accepts ${r.id}: the auditor and the reviewer are contacts`);
    o.out(`demo  reviewer invites the auditor into ${roomId}`);
    await reviewer.rooms.room(roomId).invite(ids.auditor);
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
    reviewed();
  });
  auditor.on('room_event', async (d) => {
    const change = d.message.parts.find((p) => p.type === 'data')?.data;
    if (d.room !== roomId || change?.change !== 'joined' || change.member !== ids.auditor) return;
    await auditor.rooms
      .room(d.room)
      .send('Auditor here: before the 50% step, check that the canary config holds no secrets.', {
        mentions: [ids.reviewer],
      });
    o.out('demo  auditor → room: before the 50% step, check that the canary config holds no secrets.');
    audited();
  });
  await Promise.all([planner.listening, reviewer.listening, auditor.listening]);

  const room = await planner.rooms.create('Review: billing rollout plan', {
    members: [ids.reviewer, o.home.state.admin.id],
  });
  roomId = room.id;
  o.out(`demo  planner (${ids.planner}) and reviewer (${ids.reviewer}) meet in ${room.id}`);
  await room.send(
    'Plan: 1) deploy billing-v2 next to v1, 2) switch traffic to v2, 3) remove v1 after a week. @reviewer please review.',
    { mentions: [ids.reviewer], delegation: await governance.handover(planner, room.id) },
  );
  o.out('demo  planner → room: Plan: deploy billing-v2, switch traffic, remove v1…');

  const finished = conversation
    .then(async () => {
      await askForContact();
      await consentStep;
      await governance.reportAndPrintUsage(planner, reviewer);
    })
    .catch((err: unknown) => o.out(`demo  the consent step failed: ${(err as Error).message}`))
    .then(() => runTaskDemo({ natsUrl: o.natsUrl, home: o.home, ids, planner, reviewer, out: o.out }))
    .catch((err: unknown) => o.out(`demo  the task step failed: ${(err as Error).message}`));

  /** The auditor, owned by someone else, finds the reviewer and asks for contact. */
  async function askForContact(): Promise<void> {
    const found = await auditor.directory.discover({ skill: 'code-review' });
    const target = found.agents.find((l) => l.agent.id === ids.reviewer);
    if (!target) throw new Error('the reviewer is not discoverable');
    o.out(
      `demo  auditor (${ids.auditor}, owned by ${ids.dana}) finds ${target.agent.card.name} (${ids.reviewer}) by skill code-review`,
    );
    if ((await auditor.contacts.list()).contacts.some((c) => c.with === ids.reviewer)) {
      o.out('demo  the auditor and the reviewer are contacts since an earlier run');
      o.out(`demo  reviewer invites the auditor into ${roomId}`);
      await reviewer.rooms.room(roomId).invite(ids.auditor);
      return;
    }
    try {
      await auditor.rooms.create('Audit', { members: [ids.reviewer], direct: true });
    } catch (err) {
      if (!isParleyError(err, 'NO_CONSENT')) throw err;
      o.out(
        `demo  auditor → direct room with the reviewer: refused, ${err.code} (different owners, not contacts)`,
      );
    }
    const reason = 'I audit rollout plans for secrets and permissions; may I join the billing review?';
    const req = await auditor.contacts.request(ids.reviewer, { reason });
    o.out(`demo  auditor → reviewer: contact request ${req.id} “${reason}”`);
  }

  return {
    room: room.id,
    finished,
    async stop() {
      await Promise.allSettled([planner.close(), reviewer.close(), auditor.close(), governance.close()]);
    },
  };
}
