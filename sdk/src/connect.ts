import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { decode } from '@nats-io/jwt';
import { fromSeed } from '@nats-io/nkeys';
import {
  credsAuthenticator,
  errors,
  type NatsConnection,
  type NodeConnectionOptions,
  connect as natsConnect,
  wsconnect,
} from '@nats-io/transport-node';
import { adoptConnection, NATS_CONNECT_TIMEOUT_MS, ParleyError, subjects } from '@parley/contracts';
import { localBackbone } from './local-home.js';
import type { PresenceOptions } from './presence.js';

/** Options of {@link connect}. */
export interface ConnectOptions {
  /**
   * NATS server URL(s). `ws://` / `wss://` URLs connect over the NATS WebSocket listener (from
   * outside a cluster, through an Ingress). @default `NATS_URL`, else where the local `npm start`
   * runs (its run.json), else nats://127.0.0.1:4222
   */
  servers?: string | string[];
  /**
   * A creds file path, or its contents (what `parley agent create --out` writes).
   * @default the local admin's: `$PARLEY_HOME/creds/admin.creds`, else `./.parley/creds/admin.creds`
   */
  creds?: string | Uint8Array;
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

const JWT_BLOCK = /-----BEGIN NATS USER JWT-----\s*(\S+)\s*------END NATS USER JWT------/;
const SEED_BLOCK = /-----BEGIN USER NKEY SEED-----\s*(\S+)\s*------END USER NKEY SEED------/;

/**
 * Reads a creds file (or its contents) and the identity inside it. A file that cannot be read or
 * does not parse is refused with `INVALID_ARGUMENT` naming the file and what is wrong with it.
 */
export async function readCreds(creds: string | Uint8Array): Promise<CredsIdentity> {
  let raw: Uint8Array;
  let what = 'the creds';
  if (typeof creds !== 'string') raw = creds;
  else if (creds.includes('BEGIN NATS USER JWT')) raw = new TextEncoder().encode(creds);
  else {
    what = `creds file ${creds}`;
    try {
      raw = new Uint8Array(await readFile(creds));
    } catch (err) {
      throw new ParleyError('INVALID_ARGUMENT', `cannot read creds file ${creds}: ${(err as Error).message}`);
    }
  }
  const damaged = (problem: string) =>
    new ParleyError(
      'INVALID_ARGUMENT',
      `${what} is damaged: ${problem} (a creds file is written by parley agent create/rotate or user create; write a new one with parley agent rotate <agt_…> --out <file>)`,
    );
  const text = new TextDecoder().decode(raw);
  const jwt = text.match(JWT_BLOCK)?.[1];
  if (!jwt) throw damaged('no NATS user JWT block inside');
  let claims: ReturnType<typeof decode>;
  try {
    claims = decode(jwt);
  } catch (err) {
    throw damaged(`its user JWT does not decode (${(err as Error).message})`);
  }
  if (!claims.name) throw damaged('its user JWT names no participant');
  const seed = text.match(SEED_BLOCK)?.[1];
  if (!seed) throw damaged('no user NKEY seed block inside');
  let publicKey: string;
  try {
    publicKey = fromSeed(new TextEncoder().encode(seed)).getPublicKey();
  } catch (err) {
    throw damaged(`its NKEY seed does not parse (${(err as Error).message})`);
  }
  if (publicKey !== claims.sub) throw damaged('its NKEY seed does not belong to its user JWT');
  return { id: claims.name, userPublicKey: claims.sub, raw };
}

/** The creds and servers {@link connect} uses when the options leave them out. */
export function resolveConnectTarget(options: Pick<ConnectOptions, 'servers' | 'creds'>): {
  servers: string | string[];
  creds: string | Uint8Array;
} {
  if (options.creds !== undefined && options.servers !== undefined) {
    return { servers: options.servers, creds: options.creds };
  }
  const local = localBackbone();
  if (options.creds === undefined && !existsSync(local.adminCreds)) {
    throw new ParleyError(
      'INVALID_ARGUMENT',
      `no creds given and no local admin creds at ${local.adminCreds}: start Parley with npm start (or set PARLEY_HOME to its home), or pass creds`,
    );
  }
  return {
    servers: options.servers ?? local.natsUrl,
    creds: options.creds ?? local.adminCreds,
  };
}

/** Connects to NATS as the identity in the creds; the reply prefix is `_INBOX.<id>` as permissions require. */
export async function connectWithCreds(
  options: ConnectOptions = {},
): Promise<{ nc: NatsConnection; identity: CredsIdentity }> {
  const target = resolveConnectTarget(options);
  const identity = await readCreds(target.creds);
  const whose =
    typeof target.creds === 'string' && !target.creds.includes('BEGIN NATS') ? ` (${target.creds})` : '';
  const opts: NodeConnectionOptions = {
    servers: target.servers,
    name: options.name ?? `parley-sdk:${identity.id}`,
    authenticator: credsAuthenticator(identity.raw),
    inboxPrefix: subjects.replyPrefix(identity.id),
    noAsyncTraces: true,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    // Per attempt, reconnects included: nats.js waits 20 s by default for a server that accepted
    // the TCP connection but does not answer (seen after a cluster restart; NATS_CONNECT_TIMEOUT_MS).
    timeout: NATS_CONNECT_TIMEOUT_MS,
  };
  for (let attempt = 1; ; attempt++) {
    try {
      // Coalesced writes, requests held while it reconnects, a reconnect closed early tried again (contracts).
      const nc = adoptConnection(
        isWebSocket(target.servers) ? await connectWebSocket(opts) : await natsConnect(opts),
      );
      return { nc, identity };
    } catch (err) {
      // The server gives a client a short time from its INFO to a signed CONNECT (2 s by default,
      // 10 s in the configs Parley writes; a server of someone else's may keep the default). On a
      // loaded machine either side can miss it: that is a passing condition, not a refusal of the
      // creds, so it is tried again and, if it persists, reported as UNAVAILABLE.
      if (!isAuthTimeout(err)) throw connectError(err, identity.id, whose, target.servers);
      if (attempt >= AUTH_TIMEOUT_ATTEMPTS)
        throw new ParleyError(
          'UNAVAILABLE',
          `NATS at ${String(target.servers)} timed out the authentication of ${identity.id} ${attempt} times (a loaded server or a slow network)`,
          { cause: err, retryAfterMs: 1000 },
        );
      // Jittered, growing waits: thousands of agents connecting at once must not come back together.
      await new Promise((r) => setTimeout(r, 250 * 2 ** (attempt - 1) * (0.5 + Math.random())));
    }
  }
}

/** Connect attempts when the server times out the authentication (each can take its auth timeout). */
const AUTH_TIMEOUT_ATTEMPTS = 5;

// nats.js has one class for the server's three authorization -ERRs; the protocol's error text
// (`-ERR 'Authentication Timeout'`) is the only thing that tells the timeout apart.
function isAuthTimeout(err: unknown): boolean {
  return err instanceof errors.AuthorizationError && /authentication timeout/i.test(err.message);
}

function connectError(err: unknown, id: string, whose: string, servers: string | string[]): ParleyError {
  const msg = (err as Error).message ?? String(err);
  // nats.js classifies the server's -ERR: revoked and unknown creds are an authorization
  // violation, expired ones an expired authentication.
  if (err instanceof errors.AuthorizationError || err instanceof errors.UserAuthenticationExpiredError) {
    return new ParleyError(
      'UNAUTHENTICATED',
      `the server refused the creds of ${id}${whose}: ${msg}. They may have been rotated or revoked (parley agent rotate ${id} --out <file> writes new ones), or belong to another Parley`,
      { cause: err },
    );
  }
  return new ParleyError('UNAVAILABLE', `cannot reach NATS at ${String(servers)}: ${msg}`, {
    cause: err,
    retryAfterMs: 1000,
  });
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

/** How long {@link drainConnection} lets a drain take before it closes the connection, ms. */
export const DRAIN_TIMEOUT_MS = 10_000;

/**
 * Drains `nc` (what was published goes out, subscriptions end) and resolves once it is closed,
 * whatever state it was in:
 * - a drain that fails (the connection dropped under it) closes the connection instead;
 * - a drain the connection outlives ends with it: nats.js leaves the drain's flush pending forever
 *   when the connection closes while reconnecting (its creds were revoked, say);
 * - a drain still waiting after {@link DRAIN_TIMEOUT_MS} (the server is away and the connection
 *   keeps reconnecting) closes the connection: acknowledgements not yet sent are lost, and those
 *   deliveries come again on the next connection.
 */
export async function drainConnection(nc: NatsConnection, timeoutMs = DRAIN_TIMEOUT_MS): Promise<void> {
  if (nc.isClosed()) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    nc.drain().catch(() => nc.close()),
    nc.closed(),
    new Promise<void>((r) => {
      timer = setTimeout(() => void nc.close().then(r, r), timeoutMs);
    }),
  ]);
  clearTimeout(timer);
}
