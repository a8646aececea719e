import { readFile } from 'node:fs/promises';
import {
  connect,
  credsAuthenticator,
  type NatsConnection,
  type NodeConnectionOptions,
} from '@nats-io/transport-node';
import { adoptConnection, NATS_CONNECT_TIMEOUT_MS, subjects } from '@parley/contracts';
import type { Logger } from 'pino';

/** Options of {@link connectNats}. */
export interface ConnectNatsOptions {
  /** Server URLs. */
  servers: string | string[];
  /** Connection name shown in server monitoring, e.g. `parley-rooms`. */
  name: string;
  /** A creds file's path, or its contents. */
  creds?: string | Uint8Array;
  /**
   * The principal this connection speaks for (`svc_rooms`, `agt_…`). Sets the reply prefix to
   * `_INBOX.<id>`, which a participant's permissions require.
   */
  principal?: string;
  /** Passed through to the client. */
  extra?: Partial<NodeConnectionOptions>;
  /** Where connection trouble (disconnects, reconnects, stale connections, slow consumers) is logged. */
  log?: Logger;
}

/** Reads a creds file unless it already is the file's contents. */
export async function loadCreds(creds: string | Uint8Array): Promise<Uint8Array> {
  if (typeof creds !== 'string') return creds;
  if (creds.includes('BEGIN NATS USER JWT')) return new TextEncoder().encode(creds);
  return new Uint8Array(await readFile(creds));
}

/**
 * Connects to NATS the way every Parley process does: reconnecting forever, and with async stack
 * traces off (the client otherwise builds an Error per request and publish: +30% throughput on the
 * message path, measured in the prototype).
 */
export async function connectNats(options: ConnectNatsOptions): Promise<NatsConnection> {
  const opts: NodeConnectionOptions = {
    servers: options.servers,
    name: options.name,
    noAsyncTraces: true,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    // Per attempt, reconnects included (see NATS_CONNECT_TIMEOUT_MS).
    timeout: NATS_CONNECT_TIMEOUT_MS,
    // nats.js stops reconnecting for good after the same authentication error twice: an
    // "Authentication Timeout" on a busy server is not a verdict on the creds, and a service whose
    // connection closed never delivers again (a fan-out connection did, after a cluster restart).
    // A service keeps trying, and says so in its log (logConnectionStatus).
    ignoreAuthErrorAbort: true,
    pingInterval: 10_000,
    ...options.extra,
  };
  if (options.principal) opts.inboxPrefix = subjects.replyPrefix(options.principal);
  if (options.creds !== undefined) {
    opts.authenticator = credsAuthenticator(await loadCreds(options.creds));
  }
  // Coalesced writes, requests held while it reconnects, a reconnect closed early tried again (contracts).
  const nc = adoptConnection(await connect(opts));
  if (options.log) logConnectionStatus(nc, options.log.child({ nats: options.name }));
  return nc;
}

/** Logs what happens to a connection: a stalled service is explained by these lines. */
export function logConnectionStatus(nc: NatsConnection, log: Logger): void {
  void (async () => {
    for await (const s of nc.status()) {
      switch (s.type) {
        case 'disconnect':
        case 'staleConnection':
        case 'slowConsumer':
        case 'error':
          log.warn({ status: s.type, detail: 'error' in s ? String(s.error) : undefined }, `NATS ${s.type}`);
          break;
        case 'reconnect':
          log.warn({ status: s.type }, 'NATS reconnected');
          break;
        default:
          break;
      }
    }
  })();
}
