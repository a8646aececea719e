/** Creating orgs, people and agents in a test Parley, and connecting as them. */

import { credsAuthenticator, type NatsConnection, connect as natsConnect } from '@nats-io/transport-node';
import {
  type AgentCardInput,
  type Agent as AgentRecord,
  type Human,
  type Org,
  type Part,
  registryApi,
  subjects,
} from '@parley/contracts';
import { mintServiceCreds, mintSystemCreds } from '@parley/keys';
import {
  type Agent,
  type ConnectOptions,
  type CursorStore,
  connect,
  type Delivery,
  type RoomHandle,
} from '@parley/sdk';
import type { TestParley } from './parley.js';

/** Connects to a test Parley with `creds` (no heartbeats unless asked for). */
export function connectTo(
  parley: TestParley,
  creds: string,
  options: Partial<ConnectOptions> = {},
): Promise<Agent> {
  return connect({ servers: parley.natsUrl, creds, presence: false, ...options });
}

/** The local admin (superadmin of the seeded org). */
export function connectAdmin(parley: TestParley): Promise<Agent> {
  return connectTo(parley, parley.home.paths.adminCreds);
}

/** Creates an org as `caller` (the admin). */
export function createOrg(caller: Agent, name: string): Promise<Org> {
  return caller.call(registryApi.createOrg, { name });
}

/** Creates a person; returns the record and their creds. */
export async function createHuman(
  caller: Agent,
  input: { org: string; name: string; role?: 'admin' | 'member' },
): Promise<{ user: Human; creds: string }> {
  const r = await caller.call(registryApi.createUser, { role: 'member', ...input });
  return { user: r.user, creds: r.credentials.creds };
}

/** Registers an agent owned by the caller (or `owner`); returns the record and its creds. */
export async function createAgent(
  caller: Agent,
  card: AgentCardInput,
  owner?: string,
): Promise<{ agent: AgentRecord; creds: string }> {
  const r = await caller.call(registryApi.createAgent, { card, ...(owner ? { owner } : {}) });
  return { agent: r.agent, creds: r.credentials.creds };
}

/** A raw NATS connection with service creds (`svc_<name>`): full access, for checking state. */
export async function connectService(parley: TestParley, name = 'test'): Promise<NatsConnection> {
  return natsConnect({
    servers: parley.natsUrl,
    authenticator: credsAuthenticator(
      new TextEncoder().encode((await mintServiceCreds(parley.home.keys, name)).creds),
    ),
    inboxPrefix: subjects.replyPrefix(`svc_${name}`),
  });
}

/** A connection as the system account's user (server events, `$SYS.REQ.…`), to every node. */
export async function connectSystem(parley: TestParley): Promise<NatsConnection> {
  return natsConnect({
    servers: parley.natsUrl.split(','),
    authenticator: credsAuthenticator(
      new TextEncoder().encode((await mintSystemCreds(parley.home.keys)).creds),
    ),
  });
}

/**
 * A cursor store in memory: what an agent handled survives a reconnect of the test's agent (the SDK
 * then notices a hole and backfills it), not the test process.
 */
export function memoryCursorStore(): CursorStore {
  const positions = new Map<string, number>();
  return { get: (room) => positions.get(room), set: (room, seq) => void positions.set(room, seq) };
}

/** The text parts of a delivered message (pushed or pulled), joined: what a test compares. */
export const textOf = (d: { message: { parts: Part[] } }): string =>
  d.message.parts.map((p) => (p.type === 'text' ? p.text : '')).join('');

/**
 * Two new participants of `parley` connected with the SDK, and a room `name` the sender made with the
 * receiver in it; `handled` collects the receiver's deliveries, in handling order. `receiverOptions`
 * go to the receiver's connect; `creds` are the receiver's, to connect it again.
 */
export async function senderAndReceiver(
  parley: TestParley,
  name: string,
  receiverOptions: Parameters<TestParley['connect']>[1] = {},
): Promise<{
  sender: Agent;
  receiver: Agent;
  member: string;
  creds: string;
  room: RoomHandle;
  handled: Delivery[];
}> {
  const s = await parley.participant();
  const r = await parley.participant();
  const sender = await parley.connect(s.creds);
  const receiver = await parley.connect(r.creds, receiverOptions);
  const handled: Delivery[] = [];
  receiver.on('message', (d) => {
    handled.push(d);
  });
  await receiver.listening;
  const room = await sender.rooms.create(name, { members: [r.id] });
  return { sender, receiver, member: r.id, creds: r.creds, room, handled };
}
