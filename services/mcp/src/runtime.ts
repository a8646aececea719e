/**
 * What an MCP session acts with: the agent (in pull mode), who it is, its runtime binding (rooms it
 * took part in, last returned position per room — also the delivery engine's cursor store) and a
 * cache telling which senders are of the agent's own org.
 */
import {
  type Agent as AgentRecord,
  bindingsApi,
  isParleyError,
  participantKind,
  type RoomMessage,
  type RuntimeBinding,
  registryApi,
  type WhoAmI,
} from '@parley/contracts';
import type { Agent, CursorStore, DeliveryOptions, PulledDelivery } from '@parley/sdk';

/** The key of a binding: which session of which runtime. */
export interface BindingKey {
  runtime: string;
  externalId: string;
}

/** Options of {@link openRuntime}. */
export interface OpenRuntimeOptions {
  /** Connects (or attaches) the agent with these delivery options; it must not be listening yet. */
  agent: (delivery: DeliveryOptions) => Promise<Agent>;
  key: BindingKey;
  /** The transport's session id, recorded in the binding. */
  session?: string;
  /** Engine errors (never thrown). */
  onError?: (err: unknown) => void;
}

/** An agent as an MCP session uses it; see {@link openRuntime}. */
export interface AgentRuntime {
  readonly agent: Agent;
  readonly me: WhoAmI;
  /** The agent's registry record (card) when it is an agent. */
  readonly record: AgentRecord | undefined;
  readonly key: BindingKey;
  /** The binding as last written. */
  binding(): RuntimeBinding;
  /** Records that the session took part in `rooms` (created, invited to, joined). */
  noteRooms(rooms: string[]): Promise<void>;
  /** `internal` for Parley itself, the agent and participants of its own org; `external` otherwise. */
  trustOf(message: RoomMessage): Promise<'internal' | 'external'>;
  /** Called for each delivery queued for the session (resource update notifications). */
  onQueued(listener: (d: PulledDelivery) => void): () => void;
  /** Gives back what was queued and not acknowledged (a successor gets it at once), then closes the agent. */
  close(): Promise<void>;
}

/**
 * Opens the runtime: binds the session (creating or refreshing its binding), then starts consuming
 * the inbox in pull mode with the binding as cursor store, so positions already returned by an
 * earlier session are never returned again.
 */
export async function openRuntime(o: OpenRuntimeOptions): Promise<AgentRuntime> {
  let binding: RuntimeBinding | undefined;
  const listeners = new Set<(d: PulledDelivery) => void>();
  let agent: Agent | undefined;
  const advance = async (positions: Record<string, number>) => {
    if (!agent) return;
    binding = await agent.call(bindingsApi.advance, { ...o.key, positions });
  };
  const cursorStore: CursorStore = {
    get: (room) => binding?.rooms[room]?.lastReturned || undefined,
    set: (room, seq) => advance({ [room]: seq }),
  };
  agent = await o.agent({
    mode: 'pull',
    cursorStore,
    onQueued: (d) => {
      for (const l of listeners) l(d);
    },
    ...(o.onError ? { onError: o.onError } : {}),
  });
  const a = agent;
  try {
    const me = await a.whoami();
    const record =
      me.kind === 'agent' ? (await a.call(registryApi.getAgent, { agent: me.id })).agent : undefined;
    binding = await a.call(bindingsApi.bind, { ...o.key, ...(o.session ? { session: o.session } : {}) });
    await a.listen();
    const orgOf = new Map<string, Promise<string | undefined>>();
    const lookupOrg = async (id: string): Promise<string | undefined> => {
      try {
        if (participantKind(id) === 'agent')
          return (await a.call(registryApi.getAgent, { agent: id })).agent.org;
        if (participantKind(id) === 'human') return (await a.call(registryApi.getUser, { user: id })).org;
      } catch (err) {
        // Not visible to us (another org's private agent or person): not ours.
        if (!isParleyError(err, 'NOT_FOUND')) orgOf.delete(id);
      }
      return undefined;
    };
    return {
      agent: a,
      me,
      record,
      key: o.key,
      binding: () => binding as RuntimeBinding,
      async noteRooms(rooms) {
        const fresh = rooms.filter((r) => !binding?.rooms[r]);
        if (fresh.length) await advance(Object.fromEntries(fresh.map((r) => [r, 0])));
      },
      async trustOf(message) {
        if (message.provenance?.trust === 'external') return 'external';
        const sender = message.sender;
        if (sender.kind === 'service' || sender.id === me.id) return 'internal';
        let org = orgOf.get(sender.id);
        if (!org) {
          org = lookupOrg(sender.id);
          orgOf.set(sender.id, org);
        }
        const theirs = await org;
        return theirs !== undefined && theirs === me.org ? 'internal' : 'external';
      },
      onQueued(listener) {
        listeners.add(listener);
        return () => listeners.delete(listener);
      },
      async close() {
        listeners.clear();
        await a.close();
      },
    };
  } catch (err) {
    await a.close();
    throw err;
  }
}
