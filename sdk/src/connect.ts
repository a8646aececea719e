import { readFile } from 'node:fs/promises';
import { decode } from '@nats-io/jwt';
import {
  credsAuthenticator,
  type NatsConnection,
  type NodeConnectionOptions,
  connect as natsConnect,
  wsconnect,
} from '@nats-io/transport-node';
import { ParleyError, subjects } from '@parley/contracts';
import type { PresenceOptions } from './presence.js';

/** Options of {@link connect}. */
export interface ConnectOptions {
  /**
   * NATS server URL(s). `ws://` / `wss://` URLs connect over the NATS WebSocket listener (from
   * outside a cluster, through an Ingress). @default nats://127.0.0.1:4222
   */
  servers?: string | string[];
  /** A creds file path, or its contents (what `parley agent create --out` writes). */
  creds: string | Uint8Array;
  /** Connection name in server monitoring. @default parley-sdk:<id> */
  name?: string;
  /** Presence heartbeats while connected (every 10 s), or `false` for none. @default {} */
  presence?: false | PresenceOptions;
}

/** The identity in a creds file: the participant (or service) id is the NATS user's name. */
export interface CredsIdentity {
  id: string;
  userPublicKey: string;
  raw: Uint8Array;
}

/** Reads a creds file (or its contents) and the identity inside it. */
export async function readCreds(creds: string | Uint8Array): Promise<CredsIdentity> {
  let raw: Uint8Array;
  if (typeof creds !== 'string') raw = creds;
  else if (creds.includes('BEGIN NATS USER JWT')) raw = new TextEncoder().encode(creds);
  else {
    try {
      raw = new Uint8Array(await readFile(creds));
    } catch (err) {
      throw new ParleyError('INVALID_ARGUMENT', `cannot read creds file ${creds}: ${(err as Error).message}`);
    }
  }
  const text = new TextDecoder().decode(raw);
  const jwt = text.match(/-----BEGIN NATS USER JWT-----\s*(\S+)\s*------END NATS USER JWT------/)?.[1];
  if (!jwt) throw new ParleyError('INVALID_ARGUMENT', 'not a NATS creds file (no user JWT inside)');
  const claims = decode(jwt);
  if (!claims.name) throw new ParleyError('INVALID_ARGUMENT', 'the creds file names no participant');
  return { id: claims.name, userPublicKey: claims.sub, raw };
}

/** Connects to NATS as the identity in the creds; the reply prefix is `_INBOX.<id>` as permissions require. */
export async function connectWithCreds(
  options: ConnectOptions,
): Promise<{ nc: NatsConnection; identity: CredsIdentity }> {
  const identity = await readCreds(options.creds);
  const servers = options.servers ?? 'nats://127.0.0.1:4222';
  const opts: NodeConnectionOptions = {
    servers,
    name: options.name ?? `parley-sdk:${identity.id}`,
    authenticator: credsAuthenticator(identity.raw),
    inboxPrefix: subjects.replyPrefix(identity.id),
    noAsyncTraces: true,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
  };
  try {
    const nc = isWebSocket(servers) ? await connectWebSocket(opts) : await natsConnect(opts);
    return { nc, identity };
  } catch (err) {
    const msg = (err as Error).message ?? String(err);
    if (/authorization|authentication|revoked|expired/i.test(msg)) {
      throw new ParleyError('UNAUTHENTICATED', `the server refused these credentials: ${msg}`, {
        cause: err,
      });
    }
    throw new ParleyError(
      'UNAVAILABLE',
      `cannot reach NATS at ${String(options.servers ?? 'nats://127.0.0.1:4222')}: ${msg}`,
      {
        cause: err,
        retryAfterMs: 1000,
      },
    );
  }
}

/** True when every URL is a WebSocket URL (`ws://`, `wss://`). */
export function isWebSocket(servers: string | string[]): boolean {
  const list = (Array.isArray(servers) ? servers : servers.split(',')).map((s) => s.trim()).filter(Boolean);
  return list.length > 0 && list.every((s) => /^wss?:\/\//i.test(s));
}

/**
 * Connects over the NATS WebSocket listener. Node 20 has no stable global WebSocket (without one
 * `wsconnect` waits forever), so the `ws` package provides the socket.
 */
async function connectWebSocket(opts: NodeConnectionOptions): Promise<NatsConnection> {
  const { WebSocket } = await import('ws');
  return wsconnect({
    ...opts,
    wsFactory: async (url: string) => {
      const socket = new WebSocket(url);
      return { socket: socket as unknown as globalThis.WebSocket, encrypted: /^wss:/i.test(url) };
    },
  } as Parameters<typeof wsconnect>[0]);
}
