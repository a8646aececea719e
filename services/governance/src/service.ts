import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  buckets,
  governanceApi,
  isServiceId,
  type PrincipalId,
  registryApi,
  request,
  serviceId,
} from '@parley/contracts';
import {
  bind,
  createMicroService,
  type Logger,
  type ParleyService,
  type ServiceTelemetry,
  serveApis,
} from '@parley/kit';
import { type AccountUpdates, type Credentials, createCredentials } from './credentials.js';
import { mintParticipantCreds } from './operator.js';

export type { AccountUpdates } from './credentials.js';

/** What the governance service needs. */
export interface GovernanceDeps extends ServiceTelemetry {
  nc: NatsConnection;
  log: Logger;
  config: {
    PARLEY_ACCOUNT_PUBLIC_KEY: string;
    PARLEY_PARTICIPANT_SIGNING_SEED: string;
  };
  /**
   * Pushing account JWT updates (revocations) to the NATS server. Without it, revocation and
   * rotation are recorded in `parley_policy` (and enforced by the ingress) but old creds can still
   * connect.
   */
  accountUpdates?: AccountUpdates | undefined;
}

const SELF = serviceId('governance');

/** The governance service: credentials, delegation, authorization, audit, guards, usage. */
export function createGovernanceService(deps: GovernanceDeps): ParleyService & {
  /** Pushes the recorded revocations to the NATS server again (done at start). */
  pushRevocations(): Promise<number>;
} {
  const log = deps.log.child({ component: 'governance' });
  let micro: ReturnType<typeof createMicroService> | undefined;
  let credentials: Credentials | undefined;
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
      const policy = await new Kvm(deps.nc).open(buckets.policy);
      credentials = createCredentials({
        policy,
        js: jetstream(deps.nc),
        log,
        accountUpdates: deps.accountUpdates,
        mint: (participant) =>
          mintParticipantCreds(
            deps.config.PARLEY_PARTICIPANT_SIGNING_SEED,
            deps.config.PARLEY_ACCOUNT_PUBLIC_KEY,
            participant,
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
      micro = createMicroService(deps.nc, {
        name: 'parley-governance',
        version: '0.1.0',
        description: 'Credentials, delegation, authorization, audit, kill switch, guards, usage.',
      });
      serveApis(
        micro,
        [
          bind(governanceApi.issueCredentials, (req, ctx) =>
            creds().issue(req.participant, ctx.caller as PrincipalId),
          ),
          bind(governanceApi.rotateCredentials, async (req, ctx) => {
            await checkManage(ctx.caller, req.participant);
            return creds().rotate(req.participant, ctx.caller as PrincipalId);
          }),
          bind(governanceApi.revokeCredentials, async (req, ctx) => {
            await checkManage(ctx.caller, req.participant);
            return { revoked: await creds().revoke(req.participant, ctx.caller as PrincipalId, req.reason) };
          }),
        ],
        { service: 'governance', queue: 'governance', log, tracer: deps.tracer, metrics: deps.metrics },
      );
      started = true;
    },
    async stop() {
      started = false;
      await micro?.stop();
    },
    ready: () => started,
  };
}
