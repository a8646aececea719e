/**
 * authorize: may the caller perform an action, under a delegation token or on its own authority?
 *
 * Allowed only if, in this order (the first failing check decides, and says so in `decidedBy`):
 * 1. the token verifies (signature, expiry, revocation) — `decidedBy: token`;
 * 2. the caller is the token's current actor — `token`;
 * 3. nobody in the chain (principal and every actor) is suspended or revoked — that participant;
 * 4. the action is in the token's scope — or, when it is not, whichever link lost it: the
 *    principal who never held it, the actor whose card cannot carry it, or the one who narrowed
 *    the token when issuing or exchanging it;
 * 5. the principal still holds it (grants can be withdrawn after a token was issued);
 * 6. the current actor is itself granted it (its card's scopes);
 * 7. org policy (the principal's org and the actor's) does not deny it — `org <id>`.
 * Without a token an agent acts on its owner's authority (principal = the owner, chain = [agent]),
 * a human on their own.
 *
 * Every call is an audit record (domain `policy`). An allow may be reused for `ttlMs`: governance
 * caches decisions (cleared by any policy change), and the SDK caches allows; when a token of a
 * cached allow is revoked or someone of its chain is suspended, every replica tells the callers
 * that hold such allows on `_INBOX.<id>.policy` (core NATS), so their caches drop them at once.
 */
import { createHash } from 'node:crypto';
import type { JetStreamClient } from '@nats-io/jetstream';
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import {
  type ApiParsedRequest,
  type ApiResponse,
  type ApprovalRule,
  anyScopeCovers,
  type Decision,
  type DelegationView,
  encodeJson,
  type governanceApi,
  isParleyError,
  type PrincipalId,
  subjects,
} from '@parley/contracts';
import type { DelegationVerifier, Logger, ParleyMetrics } from '@parley/kit';
import { LRUCache } from 'lru-cache';
import { audit } from './audit.js';
import type { Delegation } from './delegation.js';
import type { Directory } from './directory.js';
import type { PolicyStore } from './policy-store.js';

type AuthorizeRequest = ApiParsedRequest<typeof governanceApi.authorize>;
type AuthorizeResponse = ApiResponse<typeof governanceApi.authorize>;

/** What authorization needs. */
export interface AuthorizationDeps {
  nc: NatsConnection;
  js: JetStreamClient;
  verifier: DelegationVerifier;
  directory: Directory;
  store: PolicyStore;
  delegation: Delegation;
  cacheMs: number;
  log: Logger;
  metrics?: ParleyMetrics | undefined;
}

/** A decision with whose authority it is about and, for APPROVAL_REQUIRED, the rule that holds it. */
export interface Outcome {
  decision: Decision;
  principal?: string;
  chain: string[];
  view?: DelegationView;
  approval?: ApprovalRule;
  /** The org whose rule holds it. */
  approvalOrg?: string;
}

const deny = (
  reason: string,
  decidedBy: string,
  code: NonNullable<Decision['code']> = 'PERMISSION_DENIED',
): Decision => ({ allow: false, reason, decidedBy, code });

const hash = (token: string) => createHash('sha256').update(token).digest('base64url').slice(0, 22);

/** Builds authorize. */
export function createAuthorization(deps: AuthorizationDeps) {
  const { store, directory, verifier } = deps;
  // Allows only, each until its token expires or cacheMs passes; bounded (it was unbounded between
  // sweeps); cleared on every policy, revocation or registry change.
  const cache = new LRUCache<string, { outcome: Outcome; until: number }>({ max: 50_000 });
  /** jti or participant → caller → until when it may hold an allow involving it. */
  const holders = new Map<string, Map<string, number>>();
  let registryChanges: Subscription | undefined;

  function hold(key: string, caller: string, until: number): void {
    let m = holders.get(key);
    if (!m) {
      m = new Map();
      holders.set(key, m);
    }
    m.set(caller, until);
  }

  /** Tells every caller holding a cached allow that involves `key` to drop it. */
  function notifyHolders(key: string, notice: Record<string, unknown>): void {
    const m = holders.get(key);
    if (!m) return;
    holders.delete(key);
    const now = Date.now();
    for (const [caller, until] of m) {
      if (until < now) continue;
      try {
        deps.nc.publish(subjects.policyNotice(caller), encodeJson(notice));
      } catch (err) {
        deps.log.warn({ err, caller }, 'policy notice not sent');
      }
    }
  }

  store.onChange((c) => {
    cache.clear();
    if (c.kind === 'participant' && c.value && c.value.status !== 'active') {
      notifyHolders(c.id, { participant: c.id, status: c.value.status });
    }
  });
  verifier.onRevocation((r) => {
    cache.clear();
    if (r.jti) notifyHolders(r.jti, { jti: r.jti, revoked: true });
    if (r.participant) notifyHolders(r.participant, { participant: r.participant, revoked: true });
  });
  // Sweep expired holders now and then, so the map does not grow with callers that went away.
  const sweep = setInterval(() => {
    const now = Date.now();
    for (const [key, m] of holders) {
      for (const [caller, until] of m) if (until < now) m.delete(caller);
      if (m.size === 0) holders.delete(key);
    }
  }, 30_000);
  sweep.unref();

  /** Which link lost `action` on the way to the current token. */
  async function whoLost(view: DelegationView, action: string, org: string | undefined): Promise<Decision> {
    if (!anyScopeCovers(store.holdings(view.principal, org), action)) {
      return deny(
        `${view.principal} (the principal) does not hold ${action}, so no delegation of theirs can carry it`,
        view.principal,
      );
    }
    for (const actor of view.chain) {
      const facts = await directory.find(actor);
      if (facts?.kind === 'agent' && !anyScopeCovers(facts.scopes, action)) {
        return deny(
          `${actor} may not hold ${action} (not on its card), so the token lost it at that link`,
          actor,
        );
      }
    }
    for (const jti of view.lineage) {
      const r = await deps.delegation.tokenRecord(jti);
      if (r && !anyScopeCovers(r.scope, action)) {
        return deny(
          `${action} was left out when ${r.issuedBy} ${r.parent ? 'exchanged' : 'issued'} ${jti}`,
          r.issuedBy,
        );
      }
    }
    return deny(`${action} is not in the token's scope (${view.scope.join(', ')})`, 'token');
  }

  async function decide(caller: string, req: Pick<AuthorizeRequest, 'action' | 'token'>): Promise<Outcome> {
    const action = req.action;
    let view: DelegationView | undefined;
    if (req.token) {
      try {
        view = await verifier.verify(req.token);
      } catch (err) {
        if (!isParleyError(err)) throw err;
        const code = (['EXPIRED', 'REVOKED'] as const).find((c) => c === err.code) ?? 'UNAUTHENTICATED';
        return { decision: deny(err.message, 'token', code), chain: [] };
      }
      if (view.actor !== caller) {
        return {
          decision: deny(`${caller} is not the token's current actor (${view.actor} is)`, 'token'),
          principal: view.principal,
          chain: view.chain,
          view,
        };
      }
    }
    const me = await directory.participant(caller);
    const principal = view?.principal ?? (me.kind === 'agent' ? me.owner : caller);
    const chain = view?.chain ?? (me.kind === 'agent' ? [caller] : []);
    const base = { principal, chain, ...(view ? { view } : {}) };
    for (const p of [principal, ...chain]) {
      const s = store.standing(p);
      if (s && s.status !== 'active') {
        const code =
          s.status === 'revoked' ? 'REVOKED' : s.cause === 'budget' ? 'BUDGET_EXCEEDED' : 'SUSPENDED';
        return { ...base, decision: deny(`${p} is ${s.status}: ${s.reason}`, p, code) };
      }
    }
    const principalFacts = await directory.find(principal);
    const principalOrg = principalFacts?.org;
    if (view && !anyScopeCovers(view.scope, action)) {
      return { ...base, decision: await whoLost(view, action, principalOrg) };
    }
    if (!anyScopeCovers(store.holdings(principal, principalOrg), action)) {
      const whose =
        me.kind === 'agent' && !view
          ? `${caller} acts on its own authority, which is its owner's, and ${principal} does not hold ${action}`
          : `${principal} does not hold ${action}`;
      return { ...base, decision: deny(whose, principal) };
    }
    if (me.kind === 'agent' && !anyScopeCovers(me.scopes, action)) {
      return {
        ...base,
        decision: deny(
          `${caller} itself is not granted ${action} (its card lists ${me.scopes.join(', ') || 'no scopes'})`,
          caller,
        ),
      };
    }
    for (const org of new Set([principalOrg, me.org].filter((o): o is string => Boolean(o)))) {
      const denied = store.orgPolicy(org)?.deny ?? [];
      if (anyScopeCovers(denied, action)) {
        return { ...base, decision: deny(`the policy of ${org} denies ${action}`, `org ${org}`) };
      }
    }
    // Allowed in every other respect: org policy may still hold it for a person's yes.
    for (const org of new Set([principalOrg, me.org].filter((o): o is string => Boolean(o)))) {
      const rule = store.orgPolicy(org)?.requireApproval?.find((r) => anyScopeCovers([r.scope], action));
      if (rule) {
        return {
          ...base,
          approval: rule,
          approvalOrg: org,
          decision: deny(
            `the policy of ${org} holds ${action} for approval by ${rule.approver}`,
            `org ${org}`,
            'APPROVAL_REQUIRED',
          ),
        };
      }
    }
    return {
      ...base,
      decision: {
        allow: true,
        reason: view
          ? `${action} is in the token's scope, held by ${principal} and granted to ${caller}`
          : `${caller} holds ${action}${me.kind === 'agent' ? ` (on its card; its owner ${principal} holds it)` : ''}`,
        decidedBy: 'policy',
      },
    };
  }

  return {
    /** The decision without caching or audit (approvals check a held call again with it). */
    decide,
    /** Starts listening for card changes (they change what an agent is granted). */
    start() {
      registryChanges = deps.nc.subscribe(subjects.eventsOf('registry'), { callback: () => cache.clear() });
    },
    stop() {
      clearInterval(sweep);
      registryChanges?.unsubscribe();
    },

    async authorize(req: AuthorizeRequest, caller: string): Promise<AuthorizeResponse> {
      const key = `${caller}|${req.token ? hash(req.token) : '-'}|${req.action}`;
      const now = Date.now();
      let outcome = cache.get(key);
      const cached = outcome !== undefined && outcome.until > now;
      if (!cached) {
        const decided = await decide(caller, req);
        const expires = decided.view ? decided.view.expiresAt.getTime() : Number.POSITIVE_INFINITY;
        outcome = { outcome: decided, until: Math.min(now + deps.cacheMs, expires) };
        if (decided.decision.allow && deps.cacheMs > 0 && outcome.until > now)
          cache.set(key, outcome, { ttl: outcome.until - now });
      }
      const { decision, principal, chain, view, approval } = (outcome as { outcome: Outcome }).outcome;
      const ttlMs = decision.allow ? Math.max(0, Math.min(deps.cacheMs, (outcome?.until ?? now) - now)) : 0;
      if (ttlMs > 0) {
        const until = now + ttlMs;
        for (const k of [...(view?.lineage ?? []), ...(principal ? [principal] : []), ...chain])
          hold(k, caller, until);
      }
      if (!decision.allow) deps.metrics?.recordDenial(decision.code ?? 'PERMISSION_DENIED');
      await audit(deps.js, {
        domain: 'policy',
        action: 'authorize',
        actor: caller as PrincipalId,
        ...(principal ? { onBehalfOf: [principal, ...chain] as PrincipalId[] } : {}),
        decision: { allow: decision.allow, reason: decision.reason, decidedBy: decision.decidedBy },
        target: req.action,
        ...(req.toolCall ? { toolCall: req.toolCall } : {}),
        ...(req.message ? { message: req.message } : {}),
        ...(req.causedBy ? { causedBy: req.causedBy } : {}),
        data: {
          action: req.action,
          ...(req.tool ? { tool: req.tool } : {}),
          ...(view ? { jti: view.claims.jti, scope: view.scope } : {}),
          ...(decision.code ? { code: decision.code } : {}),
          ...(cached ? { cached: true } : {}),
        },
      });
      return {
        ...decision,
        ...(principal ? { principal } : {}),
        chain,
        ttlMs,
        ...(approval ? { approval } : {}),
      };
    },
  };
}
