/** Finding other agents: discovery, one agent's card and presence, the inventory. */
import {
  type AgentListing,
  type ApiMethod,
  type ApiRequest,
  type ApiResponse,
  registryApi,
} from '@parley/contracts';

/** What the directory needs of a connected participant. */
export interface ApiCaller {
  call<M extends ApiMethod>(method: M, body: ApiRequest<M>): Promise<ApiResponse<M>>;
}

/** A discovery query: every field narrows the result; exact skill matches rank first. */
export type DiscoverQuery = ApiRequest<typeof registryApi.discover>;
/** An inventory query (by owner or org). */
export type ListAgentsQuery = ApiRequest<typeof registryApi.listAgents>;
/** A page of agents; pass `next` as `cursor` for the following page. */
export interface AgentPage {
  agents: AgentListing[];
  next?: string | undefined;
}

/**
 * The registry as a participant sees it: only agents it may see are ever returned, and one it may
 * not see is reported as `NOT_FOUND`, exactly like one that does not exist.
 */
export class Directory {
  readonly #caller: ApiCaller;

  /** @internal created by {@link Agent} */
  constructor(caller: ApiCaller) {
    this.#caller = caller;
  }

  /** Searches agents by skill, tag, text, runtime, owner or org. */
  discover(query: DiscoverQuery = {}): Promise<AgentPage> {
    return this.#caller.call(registryApi.discover, query);
  }

  /** One agent's card, status and presence. */
  getAgent(agentId: string): Promise<AgentListing> {
    return this.#caller.call(registryApi.getAgent, { agent: agentId });
  }

  /** The inventory: agents by owner or org, in creation order. */
  listAgents(query: ListAgentsQuery = {}): Promise<AgentPage> {
    return this.#caller.call(registryApi.listAgents, query);
  }

  /** Every page of a listing or search, for scripts. Stops after `max` agents. @default max 10000 */
  async all(
    fetch: (cursor: string | undefined) => Promise<AgentPage>,
    max = 10_000,
  ): Promise<AgentListing[]> {
    const out: AgentListing[] = [];
    let cursor: string | undefined;
    do {
      const page = await fetch(cursor);
      out.push(...page.agents);
      cursor = page.next;
    } while (cursor && out.length < max);
    return out.slice(0, max);
  }
}
