import type { NatsConnection } from '@nats-io/transport-node';
import {
  createMicroService,
  type Logger,
  type ParleyService,
  type ServiceTelemetry,
  serveApis,
} from '@parley/kit';

/** What the rooms service needs. */
export interface RoomsDeps extends ServiceTelemetry {
  nc: NatsConnection;
  log: Logger;
}

/** The rooms service: room lifecycle and membership, the ingress and the fan-out. */
export function createRoomsService(deps: RoomsDeps): ParleyService {
  const log = deps.log.child({ component: 'rooms' });
  let micro: ReturnType<typeof createMicroService> | undefined;
  let started = false;
  return {
    name: 'rooms',
    async start() {
      micro = createMicroService(deps.nc, {
        name: 'parley-rooms',
        version: '0.1.0',
        description: 'Rooms, membership, the message ingress and the fan-out.',
      });
      serveApis(micro, [], {
        service: 'rooms',
        queue: 'rooms',
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
  };
}
