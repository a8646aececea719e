/**
 * The kill switch: suspending an agent writes `participant.<id>` (status `suspended`) in
 * `parley_policy`. Every rooms ingress watches that key and refuses the agent's sends from the
 * moment its watch delivers the change (measured: well under a second on every replica), and
 * authorize denies its tool calls (this replica at once, others through the same watch). Each
 * suspension is audited (domain `suspension`), announced (`parley.evt.governance.suspended`) and
 * told to the agent's owner in their "Parley notices" room. Budgets use the same path.
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  type ApiParsedRequest,
  type ApiResponse,
  type governanceApi,
  isServiceId,
  ParleyError,
  type ParticipantPolicy,
  type PrincipalId,
  registryApi,
  request,
  roomsApi,
  serviceId,
  type Tracer,
} from '@parley/contracts';
import { type Logger, publishEvent } from '@parley/kit';
import { audit } from './audit.js';
import type { AgentFacts, Directory } from './directory.js';
import { type PolicyStore, standingOf } from './policy-store.js';

const SELF = serviceId('governance');

type Res<M extends keyof typeof governanceApi> = ApiResponse<(typeof governanceApi)[M]>;

/** What the kill switch needs. */
export interface KillSwitchDeps {
  nc: NatsConnection;
  js: JetStreamClient;
  store: PolicyStore;
  directory: Directory;
  log: Logger;
  tracer?: Tracer | undefined;
}

/** Builds suspend and resume. */
export function createKillSwitch(deps: KillSwitchDeps) {
  const { store, js } = deps;

  /**
   * A notice in the participant's notice room (rooms.notify); `key` makes a retry one notice.
   * Failures are logged, not thrown: the decision stands without it.
   */
  async function notify(to: string, text: string, data: Record<string, unknown>, key: string) {
    try {
      await request(deps.nc, SELF, roomsApi.notify, { to, text, data, key }, { tracer: deps.tracer });
    } catch (err) {
      deps.log.warn({ err, to }, 'notice not delivered');
    }
  }

  async function checkManage(caller: string, agent: string): Promise<void> {
    if (isServiceId(caller)) return;
    await request(
      deps.nc,
      SELF,
      registryApi.checkManage,
      { actor: caller as PrincipalId, participant: agent },
      { tracer: deps.tracer },
    );
  }

  function refuseRevoked(id: string): void {
    const s = store.standing(id);
    if (s?.status === 'revoked')
      throw new ParleyError('REVOKED', `${id} was revoked (${s.reason}): it stays revoked`);
  }

  const response = (agent: string, p: ParticipantPolicy) => ({
    agent,
    status: p.status,
    reason: p.reason,
    at: p.at,
  });

  /** Suspends `agent`: standing, audit, event, owner notice. */
  async function suspendAgent(
    agent: AgentFacts,
    by: string,
    reason: string,
    cause: NonNullable<ParticipantPolicy['cause']>,
  ): Promise<ParticipantPolicy> {
    refuseRevoked(agent.id);
    const value = standingOf('suspended', reason, by as PrincipalId, cause);
    await store.setStanding(agent.id, value);
    await audit(js, {
      domain: 'suspension',
      action: 'suspend',
      actor: by as PrincipalId,
      target: agent.id,
      data: { reason, cause, owner: agent.owner },
    });
    await publishEvent(js, 'governance', 'suspended', {
      actor: by,
      subject: agent.id,
      data: { owner: agent.owner, reason, cause },
    }).catch((err) => deps.log.warn({ err }, 'event not published'));
    await notify(
      agent.owner,
      `${agent.name} (${agent.id}) was suspended by ${by}: ${reason}. Its messages are refused and its tool calls denied until it is resumed: parley agent resume ${agent.id}`,
      { event: 'agent.suspended', agent: agent.id, by, reason, cause },
      `suspended:${agent.id}:${value.at}`,
    );
    deps.log.info({ agent: agent.id, by, reason, cause }, 'agent suspended');
    return value;
  }

  return {
    suspendAgent,
    notify,

    async suspend(
      req: ApiParsedRequest<typeof governanceApi.suspend>,
      caller: string,
    ): Promise<Res<'suspend'>> {
      await checkManage(caller, req.agent);
      const agent = await deps.directory.agent(req.agent);
      return response(agent.id, await suspendAgent(agent, caller, req.reason, 'kill_switch'));
    },

    async resume(req: ApiParsedRequest<typeof governanceApi.resume>, caller: string): Promise<Res<'resume'>> {
      await checkManage(caller, req.agent);
      const agent = await deps.directory.agent(req.agent);
      refuseRevoked(agent.id);
      const before = store.standing(agent.id);
      const value = standingOf('active', req.reason, caller as PrincipalId);
      await store.setStanding(agent.id, value);
      await audit(js, {
        domain: 'suspension',
        action: 'resume',
        actor: caller as PrincipalId,
        target: agent.id,
        data: { reason: req.reason, was: before?.status ?? 'active', owner: agent.owner },
      });
      await publishEvent(js, 'governance', 'resumed', {
        actor: caller,
        subject: agent.id,
        data: { owner: agent.owner, reason: req.reason },
      }).catch((err) => deps.log.warn({ err }, 'event not published'));
      if (caller !== agent.owner) {
        await notify(
          agent.owner,
          `${agent.name} (${agent.id}) was resumed by ${caller}: ${req.reason}`,
          { event: 'agent.resumed', agent: agent.id, by: caller },
          `resumed:${agent.id}:${value.at}`,
        );
      }
      return response(agent.id, value);
    },
  };
}

/** The kill switch of {@link createKillSwitch}. */
export type KillSwitch = ReturnType<typeof createKillSwitch>;
