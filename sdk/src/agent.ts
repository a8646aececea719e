import type { NatsConnection } from '@nats-io/transport-node';
import {
  type ApiMethod,
  type ApiRequest,
  type ApiResponse,
  registryApi,
  request,
  type WhoAmI,
} from '@parley/contracts';
import { type ConnectOptions, connectWithCreds } from './connect.js';
import { Directory } from './directory.js';
import { PresenceReporter } from './presence.js';

/** Options of {@link Agent.call}. */
export interface CallOptions {
  /** Milliseconds to wait. @default 5000 */
  timeout?: number;
}

/**
 * A connected participant (agent or human): everything it does on Parley goes through this handle.
 * Create it with {@link connect}; {@link Agent.close} drains it.
 */
export class Agent {
  /** The participant id (`agt_…` or `usr_…`). */
  readonly id: string;
  /** The underlying NATS connection. */
  readonly nc: NatsConnection;
  /** Discovery, cards and the inventory (registry). */
  readonly directory: Directory;
  /** This participant's presence: `agent.presence.set('busy', 'reviewing PR 42')`. */
  readonly presence: PresenceReporter;

  /** @internal use {@link connect} */
  constructor(nc: NatsConnection, id: string) {
    this.nc = nc;
    this.id = id;
    this.directory = new Directory(this);
    this.presence = new PresenceReporter(nc, id);
  }

  /** Calls an API method as this participant. Refusals throw a ParleyError with a code. */
  call<M extends ApiMethod>(
    method: M,
    body: ApiRequest<M>,
    options: CallOptions = {},
  ): Promise<ApiResponse<M>> {
    return request(this.nc, this.id, method, body, options);
  }

  /** Who the registry says this participant is. */
  whoami(): Promise<WhoAmI> {
    return this.call(registryApi.whoami, {});
  }

  /** Lets in-flight work finish, then closes the connection. */
  async close(): Promise<void> {
    await this.presence.stop();
    if (!this.nc.isClosed()) await this.nc.drain();
  }
}

/** Connects as the participant in `creds`. */
export async function connect(options: ConnectOptions): Promise<Agent> {
  const { nc, identity } = await connectWithCreds(options);
  const agent = new Agent(nc, identity.id);
  if (options.presence !== false) await agent.presence.start(options.presence ?? {});
  return agent;
}
