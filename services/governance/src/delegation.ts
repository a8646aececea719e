/**
 * Delegation (on-behalf-of): issuing a token for a task, exchanging it down a chain of agents
 * (RFC 8693), and revoking it.
 *
 * - **Issue**: a human delegates to an agent. Every requested scope must be one the human holds
 *   (their grants and their org's) and their org does not deny, else PERMISSION_DENIED: nobody
 *   delegates authority they do not have. Scopes the agent's card does not list are dropped
 *   (reported as `dropped`); none left is a refusal.
 * - **Exchange**: only the token's current actor may pass it on, to an agent that is a contact or a
 *   fellow member of a given room. New scope = requested ∩ current ∩ the new actor's card: asking
 *   for more than the current scope is refused (escalation), what the new actor may not hold is
 *   dropped. `exp` never grows (a longer ttl is refused); the chain is at most
 *   `PARLEY_DELEGATION_MAX_DEPTH` actors. The new token nests the previous actors in `act` and
 *   lists every token it descends from in `ancestors`, so revoking any of them revokes it.
 * - **Revoke**: by jti (the principal, an actor of its chain, an admin of the org, a service) or
 *   every token a participant takes part in (itself, its owner, an admin).
 *
 * Every token is recorded in `delegation.token.<jti>` (who may revoke it, and the audit chain) and
 * every issue, exchange and revocation is an audit record (domain `delegation`).
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  type ApiParsedRequest,
  type ApiResponse,
  actClaimOf,
  consentApi,
  DELEGATION_ALG,
  DELEGATION_ISSUER,
  type DelegationView,
  type governanceApi,
  intersectScopes,
  isParleyError,
  isServiceId,
  newId,
  normalizeScopes,
  ParleyError,
  type PrincipalId,
  policyKeys,
  type RevokedPrincipal,
  type RevokedToken,
  registryApi,
  request,
  roomsApi,
  serviceId,
  type TokenRecord,
  TokenRecord as TokenRecordSchema,
  type Tracer,
  uncoveredScopes,
} from '@parley/contracts';
import type { SigningKeys } from '@parley/keys';
import { type DelegationVerifier, type Logger, publishEvent } from '@parley/kit';
import { SignJWT } from 'jose';
import { audit } from './audit.js';
import type { Directory } from './directory.js';
import type { PolicyStore } from './policy-store.js';

type Req<M extends keyof typeof governanceApi> = ApiParsedRequest<(typeof governanceApi)[M]>;
type Res<M extends keyof typeof governanceApi> = ApiResponse<(typeof governanceApi)[M]>;

const SELF = serviceId('governance');

/** What the delegation handlers need. */
export interface DelegationDeps {
  nc: NatsConnection;
  js: JetStreamClient;
  policy: KV;
  keys: SigningKeys;
  verifier: DelegationVerifier;
  directory: Directory;
  store: PolicyStore;
  maxDepth: number;
  log: Logger;
  tracer?: Tracer | undefined;
}

const denied = (message: string, details?: Record<string, unknown>) =>
  new ParleyError('PERMISSION_DENIED', message, details ? { details } : {});

/** Builds the delegation handlers. */
export function createDelegation(deps: DelegationDeps) {
  const { js, directory, store, verifier } = deps;

  /** Throws SUSPENDED/REVOKED/BUDGET_EXCEEDED when `id` may not act. */
  function requireStanding(id: string): void {
    const s = store.standing(id);
    if (!s || s.status === 'active') return;
    const code = s.status === 'revoked' ? 'REVOKED' : s.cause === 'budget' ? 'BUDGET_EXCEEDED' : 'SUSPENDED';
    throw new ParleyError(code, `${id} is ${s.status}: ${s.reason}`, { details: { participant: id } });
  }

  /** Scopes the org of `org` denies among `scopes`. */
  function orgDenied(org: string, scopes: string[]): string[] {
    const deny = store.orgPolicy(org)?.deny ?? [];
    return scopes.filter((s) => deny.some((d) => intersectScopes([d], [s]).length > 0));
  }

  async function sign(input: {
    principal: string;
    org: string;
    chain: string[];
    scope: string[];
    exp: number;
    task?: string | undefined;
    ancestors: string[];
  }): Promise<{ token: string; jti: string }> {
    const jti = newId('token');
    const token = await new SignJWT({
      org: input.org,
      act: actClaimOf(input.chain),
      scope: input.scope.join(' '),
      ...(input.task ? { task: input.task } : {}),
      ...(input.ancestors.length ? { ancestors: input.ancestors } : {}),
    })
      .setProtectedHeader({ alg: DELEGATION_ALG, kid: deps.keys.kid, typ: 'JWT' })
      .setIssuer(DELEGATION_ISSUER)
      .setAudience(DELEGATION_ISSUER)
      .setSubject(input.principal)
      .setJti(jti)
      .setIssuedAt()
      .setExpirationTime(input.exp)
      .sign(deps.keys.key);
    return { token, jti };
  }

  async function record(r: TokenRecord): Promise<void> {
    await deps.policy.put(policyKeys.token(r.jti), JSON.stringify(TokenRecordSchema.parse(r)));
  }

  /** May `a` and `b` talk: fellow members of `room`, or contacts (consent). */
  async function requireRelationship(a: string, b: string, room: string | undefined): Promise<string> {
    if (room) {
      const r = await request(
        deps.nc,
        SELF,
        roomsApi.members,
        { room, participants: [a, b] },
        { tracer: deps.tracer },
      );
      const missing = [a, b].filter((p) => !r.members.includes(p));
      if (missing.length) {
        throw new ParleyError(
          'NOT_A_MEMBER',
          `${missing.join(' and ')} ${missing.length > 1 ? 'are' : 'is'} not a member of room ${room}`,
          {
            details: { room, missing },
          },
        );
      }
      return `fellow members of ${room}`;
    }
    try {
      const c = await request(deps.nc, SELF, consentApi.check, { a, b }, { tracer: deps.tracer });
      if (c.allowed) return `contacts (${c.via})`;
      throw new ParleyError(
        'NO_CONSENT',
        `${a} and ${b} are not contacts: pass a room both are members of, or ask for contact first`,
        {
          details: { missing: c.missing ?? 'contact' },
        },
      );
    } catch (err) {
      if (isParleyError(err, 'NO_CONSENT')) throw err;
      // No consent service (yet), or it failed: contacts cannot be confirmed, so this is "not a contact".
      throw new ParleyError(
        'NO_CONSENT',
        `cannot confirm that ${a} and ${b} are contacts (the consent service answered ${isParleyError(err) ? err.code : 'with an error'}): pass a room both are members of`,
        { details: { consent: isParleyError(err) ? err.code : 'INTERNAL' } },
      );
    }
  }

  /** Verifies a token for an operation; the errors are the caller's to see. */
  async function verified(token: string): Promise<DelegationView> {
    return verifier.verify(token);
  }

  async function tokenRecord(jti: string): Promise<TokenRecord | undefined> {
    const e = await deps.policy.get(policyKeys.token(jti));
    return e?.operation === 'PUT' && e.length > 0 ? TokenRecordSchema.parse(e.json()) : undefined;
  }

  return {
    verified,
    tokenRecord,

    async issue(req: Req<'issueToken'>, caller: string): Promise<Res<'issueToken'>> {
      const principal = req.onBehalfOf ?? caller;
      if (isServiceId(principal))
        throw new ParleyError(
          'INVALID_ARGUMENT',
          'a service cannot be the principal of a delegation: name onBehalfOf',
        );
      const human = await directory.human(principal);
      if (principal !== caller && !isServiceId(caller)) {
        const me = await directory.human(caller);
        if (!me.superadmin && !(me.role === 'admin' && me.org === human.org)) {
          throw denied(`only an admin of ${human.org} may delegate on behalf of ${principal}`);
        }
      }
      requireStanding(principal);
      const actor = await directory.agent(req.actor);
      requireStanding(actor.id);
      const requested = normalizeScopes(req.scope);
      const notHeld = uncoveredScopes(requested, store.holdings(principal, human.org));
      const byOrg = orgDenied(human.org, requested);
      if (notHeld.length || byOrg.length) {
        const why = notHeld.length
          ? `${principal} does not hold ${notHeld.join(', ')}: nobody can delegate authority they do not have`
          : `the policy of ${human.org} denies ${byOrg.join(', ')}`;
        await audit(js, {
          domain: 'delegation',
          action: 'issue',
          actor: caller as PrincipalId,
          onBehalfOf: [principal, actor.id] as PrincipalId[],
          target: actor.id,
          decision: { allow: false, reason: why, decidedBy: notHeld.length ? principal : `org ${human.org}` },
          data: { scope: requested },
        });
        throw denied(why, { notHeld, deniedByOrg: byOrg });
      }
      const scope = intersectScopes(requested, actor.scopes);
      const dropped = requested.filter(
        (s) => !scope.includes(s) && uncoveredScopes([s], actor.scopes).length > 0,
      );
      if (scope.length === 0) {
        throw denied(
          `${actor.id} may hold none of ${requested.join(', ')} (its card lists ${actor.scopes.join(', ') || 'no scopes'})`,
          {
            dropped,
          },
        );
      }
      const exp = Math.floor(Date.now() / 1000) + req.ttlSeconds;
      const chain = [actor.id];
      const { token, jti } = await sign({
        principal,
        org: human.org,
        chain,
        scope,
        exp,
        task: req.task,
        ancestors: [],
      });
      await record({
        jti,
        principal,
        org: human.org,
        chain,
        scope,
        exp,
        issuedBy: caller,
        at: new Date().toISOString(),
      });
      await audit(js, {
        domain: 'delegation',
        action: 'issue',
        actor: caller as PrincipalId,
        onBehalfOf: [principal, ...chain] as PrincipalId[],
        target: actor.id,
        decision: {
          allow: true,
          reason: dropped.length
            ? `issued; ${dropped.join(', ')} dropped (not on ${actor.id}'s card)`
            : 'issued',
          decidedBy: principal,
        },
        data: { jti, scope, dropped, exp, ...(req.task ? { task: req.task } : {}) },
      });
      return { token, jti, expiresAt: new Date(exp * 1000).toISOString(), scope, dropped, chain };
    },

    async exchange(req: Req<'exchangeToken'>, caller: string): Promise<Res<'exchangeToken'>> {
      const view = await verified(req.token);
      if (view.actor !== caller) {
        throw denied(`only the token's current actor (${view.actor}) may exchange it`, { actor: view.actor });
      }
      if (req.actor === caller)
        throw new ParleyError('INVALID_ARGUMENT', 'a token cannot be exchanged for its own actor');
      const chain = [...view.chain, req.actor];
      if (chain.length > deps.maxDepth) {
        throw denied(
          `the delegation chain would have ${chain.length} actors; at most ${deps.maxDepth} are allowed`,
          {
            maxDepth: deps.maxDepth,
          },
        );
      }
      for (const p of [view.principal, ...view.chain]) requireStanding(p);
      const next = await directory.agent(req.actor);
      requireStanding(next.id);
      const requested = req.scope ? normalizeScopes(req.scope) : view.scope;
      const escalation = uncoveredScopes(requested, view.scope);
      if (escalation.length) {
        throw denied(
          `scope escalation: ${escalation.join(', ')} ${escalation.length > 1 ? 'are' : 'is'} not in the token's scope (${view.scope.join(', ')})`,
          {
            escalation,
          },
        );
      }
      const now = Math.floor(Date.now() / 1000);
      const exp = req.ttlSeconds === undefined ? view.claims.exp : now + req.ttlSeconds;
      if (exp > view.claims.exp) {
        throw denied(`exp cannot grow: the token expires at ${view.expiresAt.toISOString()}`, {
          expiresAt: view.expiresAt.toISOString(),
        });
      }
      const relation = await requireRelationship(caller, next.id, req.room);
      const scope = intersectScopes(requested, next.scopes);
      const dropped = requested.filter(
        (s) => !scope.includes(s) && uncoveredScopes([s], next.scopes).length > 0,
      );
      if (scope.length === 0) {
        throw denied(
          `${next.id} may hold none of ${requested.join(', ')} (its card lists ${next.scopes.join(', ') || 'no scopes'})`,
          {
            dropped,
          },
        );
      }
      const ancestors = view.lineage;
      const { token, jti } = await sign({
        principal: view.principal,
        org: view.claims.org,
        chain,
        scope,
        exp,
        task: view.claims.task,
        ancestors,
      });
      await record({
        jti,
        principal: view.principal,
        org: view.claims.org,
        chain,
        scope,
        exp,
        parent: view.claims.jti,
        issuedBy: caller,
        at: new Date().toISOString(),
      });
      await audit(js, {
        domain: 'delegation',
        action: 'exchange',
        actor: caller as PrincipalId,
        onBehalfOf: [view.principal, ...chain] as PrincipalId[],
        target: next.id,
        ...(req.room ? { room: req.room } : {}),
        decision: {
          allow: true,
          reason: `${relation}; ${dropped.length ? `${dropped.join(', ')} dropped (not on ${next.id}'s card)` : 'scope kept'}`,
          decidedBy: caller,
        },
        data: { jti, parent: view.claims.jti, scope, dropped, exp },
      });
      return { token, jti, expiresAt: new Date(exp * 1000).toISOString(), scope, dropped, chain };
    },

    /**
     * The token of one outbound A2A call (the gateway only). The chain is read from governance's own
     * token records, never taken from the caller: the message's delegation (its jti and the
     * tokens it was exchanged from) must be unrevoked and unexpired, with the sender as its current
     * actor; the A2A agent becomes the next actor. Without a delegation the sender is the subject.
     */
    async mintA2aCall(req: Req<'mintA2aCallToken'>, caller: string): Promise<Res<'mintA2aCallToken'>> {
      if (caller !== serviceId('gateway')) {
        throw denied('A2A call tokens are for the gateway only');
      }
      requireStanding(req.sender);
      requireStanding(req.actor);
      const now = Math.floor(Date.now() / 1000);
      let exp = now + req.ttlSeconds;
      let principal: string = req.sender;
      let chain: string[] = [req.actor];
      let scope: string[] = [];
      if (req.tokenId) {
        const r = await tokenRecord(req.tokenId);
        if (!r) throw new ParleyError('NOT_FOUND', `no token ${req.tokenId} was issued`);
        if (r.exp <= now) throw new ParleyError('EXPIRED', `the delegation token ${r.jti} expired`);
        if (r.chain[r.chain.length - 1] !== req.sender) {
          throw denied(`${req.sender} is not the current actor of the delegation token ${r.jti}`);
        }
        // Its lineage from the records, so a revoked ancestor refuses it as at the ingress.
        const lineage = [r.jti];
        for (let p = r.parent; p && lineage.length <= deps.maxDepth; ) {
          lineage.unshift(p);
          p = (await tokenRecord(p))?.parent;
        }
        verifier.checkRevoked({
          claims: { jti: r.jti, iat: Math.floor(Date.parse(r.at) / 1000) } as DelegationView['claims'],
          principal: r.principal,
          chain: r.chain,
          actor: req.sender,
          scope: r.scope,
          lineage,
          expiresAt: new Date(r.exp * 1000),
        });
        principal = r.principal;
        chain = [...r.chain, req.actor];
        scope = r.scope;
        // A call token never outlives the delegation it carries.
        exp = Math.min(exp, r.exp);
      }
      const jti = newId('token');
      const token = await new SignJWT({
        act: actClaimOf(chain),
        scope: scope.join(' '),
        room: req.room,
        sender: req.sender,
        messageId: req.messageId,
        ...(req.taskId ? { taskId: req.taskId } : {}),
        ...(req.tokenId ? { parent: req.tokenId } : {}),
      })
        .setProtectedHeader({ alg: DELEGATION_ALG, kid: deps.keys.kid, typ: 'JWT' })
        .setIssuer(DELEGATION_ISSUER)
        .setAudience([req.audience])
        .setSubject(principal)
        .setJti(jti)
        .setIssuedAt(now)
        .setExpirationTime(exp)
        .sign(deps.keys.key);
      return { token, jti, expiresAt: new Date(exp * 1000).toISOString(), principal, chain };
    },

    async revoke(req: Req<'revokeToken'>, caller: string): Promise<Res<'revokeToken'>> {
      const at = new Date().toISOString();
      if ('jti' in req) {
        const r = await tokenRecord(req.jti);
        if (!r) throw new ParleyError('NOT_FOUND', `no token ${req.jti} was issued`);
        let allowed = isServiceId(caller) || caller === r.principal || r.chain.includes(caller);
        if (!allowed && caller.startsWith('usr_')) {
          const me = await directory.human(caller);
          allowed = me.superadmin || (me.role === 'admin' && me.org === r.org);
        }
        // Someone who may not revoke it learns nothing about it.
        if (!allowed) throw new ParleyError('NOT_FOUND', `no token ${req.jti} was issued`);
        const value: RevokedToken = {
          jti: r.jti,
          by: caller as PrincipalId,
          reason: req.reason,
          at,
          exp: r.exp,
        };
        await deps.policy.put(policyKeys.revokedToken(r.jti), JSON.stringify(value));
        verifier.markRevoked({ token: value });
        await audit(js, {
          domain: 'delegation',
          action: 'revoke',
          actor: caller as PrincipalId,
          onBehalfOf: [r.principal, ...r.chain] as PrincipalId[],
          target: r.jti,
          data: { reason: req.reason },
        });
        await publishEvent(js, 'governance', 'token.revoked', {
          actor: caller,
          subject: r.jti,
          data: { reason: req.reason },
        });
        return { revoked: 'token', id: r.jti, at };
      }
      if (!isServiceId(caller) && caller !== req.principal) {
        await request(
          deps.nc,
          SELF,
          registryApi.checkManage,
          { actor: caller as PrincipalId, participant: req.principal },
          { tracer: deps.tracer },
        );
      } else if (caller === req.principal || isServiceId(caller)) {
        await directory.participant(req.principal);
      }
      const value: RevokedPrincipal = {
        participant: req.principal,
        before: Math.floor(Date.now() / 1000),
        by: caller as PrincipalId,
        reason: req.reason,
        at,
      };
      await deps.policy.put(policyKeys.revokedPrincipal(req.principal), JSON.stringify(value));
      verifier.markRevoked({ principal: value });
      await audit(js, {
        domain: 'delegation',
        action: 'revoke_all',
        actor: caller as PrincipalId,
        target: req.principal,
        data: { reason: req.reason, before: value.before },
      });
      await publishEvent(js, 'governance', 'token.revoked', {
        actor: caller,
        subject: req.principal,
        data: { reason: req.reason, all: true },
      });
      return { revoked: 'principal', id: req.principal, at };
    },
  };
}

/** The delegation handlers of {@link createDelegation}. */
export type Delegation = ReturnType<typeof createDelegation>;
