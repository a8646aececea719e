import type { NatsConnection } from '@nats-io/transport-node';
import { governanceApi } from '@parley/contracts';
import {
  bind,
  createMicroService,
  type Logger,
  type ParleyService,
  type ServiceTelemetry,
  serveApis,
} from '@parley/kit';
import { mintParticipantCreds } from './operator.js';

/** What the governance service needs. */
export interface GovernanceDeps extends ServiceTelemetry {
  nc: NatsConnection;
  log: Logger;
  config: {
    PARLEY_ACCOUNT_PUBLIC_KEY: string;
    PARLEY_PARTICIPANT_SIGNING_SEED: string;
  };
}

/** The governance service: credentials, delegation, authorization, audit, guards, usage. */
export function createGovernanceService(deps: GovernanceDeps): ParleyService {
  const log = deps.log.child({ component: 'governance' });
  let micro: ReturnType<typeof createMicroService> | undefined;
  let started = false;
  return {
    name: 'governance',
    async start() {
      micro = createMicroService(deps.nc, {
        name: 'parley-governance',
        version: '0.1.0',
        description: 'Credentials, delegation, authorization, audit, kill switch, guards, usage.',
      });
      serveApis(
        micro,
        [
          bind(governanceApi.issueCredentials, async (req) => {
            const minted = await mintParticipantCreds(
              deps.config.PARLEY_PARTICIPANT_SIGNING_SEED,
              deps.config.PARLEY_ACCOUNT_PUBLIC_KEY,
              req.participant,
            );
            log.info({ participant: req.participant, user: minted.userPublicKey }, 'credentials issued');
            return { creds: minted.creds, userPublicKey: minted.userPublicKey };
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
