/**
 * Delegation tokens from an agent's or a person's side: `agent.tokens`. A person issues a token
 * that lets an agent act for them on a task; the agent exchanges it to pass the work on (the new
 * token nests it, with at most the same scope and no later expiry); either revokes it. Tokens travel
 * in messages (`room.send(text, { delegation })`) and in tool calls (`tools.call(…, { onBehalfOf })`).
 */
import {
  type ApiRequest,
  type ApiResponse,
  type DelegationView,
  governanceApi,
  readDelegationToken,
} from '@parley/contracts';
import type { Agent } from './agent.js';
import { handling } from './handling.js';

type Issued = ApiResponse<typeof governanceApi.issueToken>;
type Exchanged = ApiResponse<typeof governanceApi.exchangeToken>;

/** A participant's delegation tokens: `agent.tokens`. */
export class Tokens {
  readonly #agent: Agent;
  readonly #invalidate: () => void;

  /** @internal created by {@link Agent} */
  constructor(agent: Agent, invalidate: () => void) {
    this.#agent = agent;
    this.#invalidate = invalidate;
  }

  /** A person delegates `scope` to `actor` (an agent) for `ttlSeconds` (default 1 hour). */
  issue(
    actor: string,
    scope: string[],
    options: { ttlSeconds?: number; onBehalfOf?: string; task?: string } = {},
  ): Promise<Issued> {
    return this.#agent.call(governanceApi.issueToken, { actor, scope, ...options });
  }

  /**
   * The token's current actor passes it to `actor` (a contact, or a fellow member of `room`).
   * `scope` narrows it (default: all of it); `ttlSeconds` may shorten it, never extend it.
   */
  exchange(
    token: string,
    actor: string,
    options: Omit<ApiRequest<typeof governanceApi.exchangeToken>, 'token' | 'actor'> = {},
  ): Promise<Exchanged> {
    return this.#agent.call(governanceApi.exchangeToken, { token, actor, ...options });
  }

  /** Revokes a token (and everything exchanged from it) by its jti, or every token of a participant. */
  async revoke(target: { jti: string } | { principal: string }, reason = 'revoked') {
    const r = await this.#agent.call(governanceApi.revokeToken, { ...target, reason });
    this.#invalidate();
    return r;
  }

  /** What a token says (principal, chain, scope, expiry), read without verifying it. */
  read(token: string): DelegationView {
    return readDelegationToken(token);
  }

  /** The token the message being handled handed to this participant, if any. */
  current(): string | undefined {
    return handling.getStore()?.delegation;
  }
}
