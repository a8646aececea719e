import { jetstream } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  approvalsApi,
  buckets,
  governanceApi,
  isServiceId,
  ParleyError,
  type PrincipalId,
  policyKeys,
  registryApi,
  request,
  serviceId,
} from '@parley/contracts';
import {
  createDelegationKey,
  loadSigningKeys,
  mintParticipantCreds,
  parseDelegationKeys,
} from '@parley/keys';
import {
  bind,
  createDelegationVerifier,
  createMicroService,
  createStandingView,
  type DelegationVerifier,
  type Logger,
  type ParleyService,
  packageVersion,
  type ServiceResponder,
  type ServiceTelemetry,
  serveApis,
  startKvm,
} from '@parley/kit';
import { createApprovals } from './approvals.js';
import { createAuditChain } from './audit-chain.js';
import { createAuthorization } from './authorization.js';
import { createBudgetStatus } from './budget-status.js';
import { type AccountUpdates, type Credentials, createCredentials } from './credentials.js';
import { createDelegation } from './delegation.js';
import { createDirectory } from './directory.js';
import { createGrants } from './grants.js';
import { createKillSwitch } from './kill-switch.js';
import { createPolicyStore, type PolicyStore } from './policy-store.js';
import { createToolCalls } from './tool-calls.js';
import { createUsage } from './usage.js';

export type { AccountUpdates } from './credentials.js';

/** What the governance service needs. */
export interface GovernanceDeps extends ServiceTelemetry, ServiceResponder {
  nc: NatsConnection;
  log: Logger;
  config: {
    PARLEY_ACCOUNT_PUBLIC_KEY: string;
    PARLEY_PARTICIPANT_SIGNING_SEED: string;
    /** Delegation signing keys (JSON, see signing-keys.ts). @default a key generated at start */
    PARLEY_DELEGATION_KEYS?: string | undefined;
    /** Most actors in a delegation chain. @default 4 */
    PARLEY_DELEGATION_MAX_DEPTH?: number | undefined;
    /** How long an allow may be reused. @default 2000 */
    PARLEY_DECISION_CACHE_MS?: number | undefined;
  };
  /**
   * Pushing account JWT updates (revocations) to the NATS server. Without it, revocation and
   * rotation are recorded in `parley_policy` (and enforced by the ingress) but old creds can still
   * connect.
   */
  accountUpdates?: AccountUpdates | undefined;
}

const SELF = serviceId('governance');
const GATEWAY = serviceId('gateway');

/** The governance service: credentials, delegation, authorization, audit, guards, usage. */
export function createGovernanceService(deps: GovernanceDeps): ParleyService & {
  /** Pushes the recorded revocations to the NATS server again (done at start). */
  pushRevocations(): Promise<number>;
} {
  const log = deps.log.child({ component: 'governance' });
  let micro: ReturnType<typeof createMicroService> | undefined;
  let credentials: Credentials | undefined;
  let verifier: DelegationVerifier | undefined;
  let store: PolicyStore | undefined;
  let stopParts: (() => unknown)[] = [];
  let started = false;

  const creds = () => {
    if (!credentials) throw new Error('governance is not started');
    return credentials;
  };

  /** Services may manage anyone; a human asks the registry (owner, org admin, superadmin, self). */
  async function checkManage(actor: string, participant: string): Promise<void> {
    if (isServiceId(actor)) return;
    await request(
      deps.nc,
      SELF,
      registryApi.checkManage,
      { actor: actor as PrincipalId, participant },
      { tracer: deps.tracer },
    );
  }

  return {
    name: 'governance',
    pushRevocations: () => creds().pushRevocations(),
    async start() {
      const kvm = startKvm(deps.nc, { log });
      const policy = await kvm.open(buckets.policy);
      const js = jetstream(deps.nc);
      credentials = createCredentials({
        policy,
        js,
        log,
        accountUpdates: deps.accountUpdates,
        mint: (participant, options) =>
          mintParticipantCreds(
            deps.config.PARLEY_PARTICIPANT_SIGNING_SEED,
            deps.config.PARLEY_ACCOUNT_PUBLIC_KEY,
            participant,
            options,
          ),
      });
      if (!deps.accountUpdates) {
        log.warn(
          'no account update signer: revoked credentials are refused by the ingress but can still connect',
        );
      } else {
        // The server may have started from an account JWT without the latest revocations.
        await credentials.pushRevocations();
      }

      // Delegation: signing keys, published so every verifier (the ingress too) knows them.
      const keys = await loadSigningKeys(
        deps.config.PARLEY_DELEGATION_KEYS
          ? parseDelegationKeys(deps.config.PARLEY_DELEGATION_KEYS)
          : { keys: [createDelegationKey()] },
      );
      if (!deps.config.PARLEY_DELEGATION_KEYS) {
        log.warn(
          { kid: keys.kid },
          'no PARLEY_DELEGATION_KEYS: signing delegation tokens with a key generated now (tokens stop verifying after a restart)',
        );
      }
      for (const jwk of keys.published) await policy.put(policyKeys.jwk(jwk.kid), JSON.stringify(jwk));
      const v = await createDelegationVerifier(policy, log);
      verifier = v;
      for (const jwk of keys.published) v.addKey(jwk);
      const s = await createPolicyStore(policy, log);
      store = s;
      const directory = createDirectory({ nc: deps.nc, tracer: deps.tracer });
      directory.start();
      const common = { nc: deps.nc, js, log, tracer: deps.tracer };
      const delegation = createDelegation({
        ...common,
        policy,
        keys,
        verifier: v,
        directory,
        store: s,
        maxDepth: deps.config.PARLEY_DELEGATION_MAX_DEPTH ?? 4,
      });
      const authorization = createAuthorization({
        ...common,
        verifier: v,
        directory,
        store: s,
        delegation,
        cacheMs: deps.config.PARLEY_DECISION_CACHE_MS ?? 2_000,
        metrics: deps.metrics,
      });
      authorization.start();
      const approvals = createApprovals({
        ...common,
        kv: policy,
        directory,
        decide: (caller, req) => authorization.decide(caller, req),
      });
      await approvals.start();
      const killSwitch = createKillSwitch({ ...common, store: s, directory });
      const usageKv = await kvm.open(buckets.usage);
      const usage = createUsage({
        ...common,
        kv: usageKv,
        store: s,
        directory,
        killSwitch,
        metrics: deps.metrics,
        responder: deps.responder,
      });
      const toolCalls = createToolCalls({ js, verifier: v, directory });
      const grants = createGrants({ ...common, directory, store: s });
      const budgetStatus = createBudgetStatus({ kv: usageKv, store: s, directory });
      const chain = createAuditChain({ ...common, directory });
      const standing = await createStandingView(policy, { log, metrics: deps.metrics });
      stopParts = [
        () => directory.stop(),
        () => authorization.stop(),
        () => approvals.stop(),
        () => usage.stop(),
        () => standing.stop(),
      ];

      micro = createMicroService(deps.responder ?? deps.nc, {
        name: 'parley-governance',
        version: packageVersion(import.meta.url),
        description: 'Credentials, delegation, authorization, audit, kill switch, guards, usage.',
      });
      serveApis(
        micro,
        [
          bind(governanceApi.issueCredentials, (req, ctx) =>
            creds().issue(req.participant, ctx.caller as PrincipalId),
          ),
          bind(governanceApi.sessionCredentials, async (req, ctx) => {
            // Narrowest possible: the one service that authenticates people and systems at the edge.
            if (ctx.caller !== GATEWAY) {
              throw new ParleyError('PERMISSION_DENIED', 'session credentials are for the gateway only');
            }
            return creds().session(req.participant, ctx.caller, req.ttlSeconds);
          }),
          bind(governanceApi.rotateCredentials, async (req, ctx) => {
            await checkManage(ctx.caller, req.participant);
            return creds().rotate(req.participant, ctx.caller as PrincipalId);
          }),
          bind(governanceApi.revokeCredentials, async (req, ctx) => {
            await checkManage(ctx.caller, req.participant);
            return { revoked: await creds().revoke(req.participant, ctx.caller as PrincipalId, req.reason) };
          }),
          bind(governanceApi.jwks, async () => ({ keys: keys.published })),
          bind(governanceApi.issueToken, (req, ctx) => delegation.issue(req, ctx.caller)),
          bind(governanceApi.exchangeToken, (req, ctx) => delegation.exchange(req, ctx.caller)),
          bind(governanceApi.revokeToken, (req, ctx) => delegation.revoke(req, ctx.caller)),
          bind(governanceApi.mintA2aCallToken, (req, ctx) => delegation.mintA2aCall(req, ctx.caller)),
          bind(governanceApi.authorize, (req, ctx) => authorization.authorize(req, ctx.caller)),
          bind(governanceApi.recordToolCall, (req, ctx) => toolCalls.record(req, ctx.caller)),
          bind(governanceApi.suspend, (req, ctx) => killSwitch.suspend(req, ctx.caller)),
          bind(governanceApi.resume, (req, ctx) => killSwitch.resume(req, ctx.caller)),
          bind(governanceApi.setGrants, (req, ctx) => grants.setGrants(req, ctx.caller)),
          bind(governanceApi.setOrgPolicy, (req, ctx) => grants.setOrgPolicy(req, ctx.caller)),
          bind(governanceApi.setBudget, (req, ctx) => usage.setBudget(req, ctx.caller)),
          bind(governanceApi.usage, (req, ctx) => usage.query(req, ctx.caller)),
          bind(governanceApi.budgets, (req, ctx) => budgetStatus.budgets(req, ctx.caller)),
          bind(governanceApi.listGrants, (req, ctx) => grants.listGrants(req, ctx.caller)),
          bind(governanceApi.auditChain, (req, ctx) => chain.chain(req.of, ctx.caller)),
          bind(approvalsApi.getOrgPolicy, (req, ctx) => grants.getOrgPolicy(req.org, ctx.caller)),
          bind(approvalsApi.requestApproval, (req, ctx) => approvals.requestApproval(req, ctx.caller)),
          bind(approvalsApi.awaitApproval, (req, ctx) => approvals.awaitApproval(req, ctx.caller)),
          bind(approvalsApi.listApprovals, (req, ctx) => approvals.listApprovals(req, ctx.caller)),
          bind(approvalsApi.decideApproval, (req, ctx) => approvals.decideApproval(req, ctx.caller)),
        ],
        {
          service: 'governance',
          queue: 'governance',
          log,
          tracer: deps.tracer,
          metrics: deps.metrics,
          standing,
        },
      );
      usage.start();
      started = true;
    },
    async stop() {
      started = false;
      await micro?.stop();
      for (const stop of stopParts) await stop();
      verifier?.stop();
      store?.stop();
    },
    ready: () => started,
  };
}
