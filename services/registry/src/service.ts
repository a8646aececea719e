import { type KV, Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  buckets,
  Human,
  type Human as HumanT,
  isServiceId,
  Org,
  type Org as OrgT,
  ParleyError,
  registryApi,
  type WhoAmI,
} from '@parley/contracts';
import {
  bind,
  createMicroService,
  type Logger,
  type ParleyService,
  type ServiceTelemetry,
  serveApis,
} from '@parley/kit';

/** What the registry needs. */
export interface RegistryDeps extends ServiceTelemetry {
  nc: NatsConnection;
  log: Logger;
}

/** Keys of the `parley_agents` bucket. */
export const registryKeys = {
  org: (id: string) => `org.${id}`,
  user: (id: string) => `user.${id}`,
  agent: (id: string) => `agent.${id}`,
};

/** The registry service: orgs, humans, agents and their cards, discovery, presence. */
export function createRegistryService(deps: RegistryDeps): ParleyService & {
  /** Creates the org and the superadmin of a fresh installation if they do not exist. */
  seed(input: { org: { id: string; name: string }; admin: { id: string; name: string } }): Promise<void>;
} {
  const log = deps.log.child({ component: 'registry' });
  let kv: KV | undefined;
  let micro: ReturnType<typeof createMicroService> | undefined;
  let started = false;

  const store = () => {
    if (!kv) throw new ParleyError('UNAVAILABLE', 'registry is not started');
    return kv;
  };

  async function getJson<T>(key: string, parse: (v: unknown) => T): Promise<T | undefined> {
    const e = await store().get(key);
    if (e?.operation !== 'PUT') return undefined;
    return parse(e.json());
  }

  async function whoami(caller: string): Promise<WhoAmI> {
    if (isServiceId(caller)) return { id: caller, kind: 'service' };
    if (caller.startsWith('usr_')) {
      const user = await getJson(registryKeys.user(caller), (v) => Human.parse(v));
      if (!user) throw new ParleyError('NOT_FOUND', `${caller} is not registered`);
      return {
        id: user.id,
        kind: 'human',
        name: user.name,
        org: user.org,
        role: user.role,
        superadmin: user.superadmin,
      };
    }
    throw new ParleyError('NOT_FOUND', `${caller} is not registered`);
  }

  return {
    name: 'registry',
    async start() {
      kv = await new Kvm(deps.nc).open(buckets.agents);
      micro = createMicroService(deps.nc, {
        name: 'parley-registry',
        version: '0.1.0',
        description: 'Orgs, humans, agents with cards, discovery and presence.',
      });
      serveApis(micro, [bind(registryApi.whoami, (_req, ctx) => whoami(ctx.caller))], {
        service: 'registry',
        queue: 'registry',
        log,
        tracer: deps.tracer,
        metrics: deps.metrics,
      });
      started = true;
    },
    async stop() {
      started = false;
      await micro?.stop();
    },
    ready: () => started,
    async seed({ org, admin }) {
      const now = new Date().toISOString();
      const orgRecord: OrgT = Org.parse({ id: org.id, name: org.name, createdAt: now });
      const adminRecord: HumanT = Human.parse({
        id: admin.id,
        org: org.id,
        name: admin.name,
        role: 'admin',
        superadmin: true,
        createdAt: now,
      });
      for (const [key, value] of [
        [registryKeys.org(org.id), orgRecord],
        [registryKeys.user(admin.id), adminRecord],
      ] as const) {
        try {
          await store().create(key, JSON.stringify(value));
        } catch (err) {
          // Already seeded on an earlier start.
          if (!/wrong last sequence|key exists/i.test((err as Error).message)) throw err;
        }
      }
    },
  };
}
