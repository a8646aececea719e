/**
 * The shared nats-server harness: real servers on free ports with temporary store directories,
 * plain or in operator mode, one node or a 3-node JetStream cluster; kill -9 and restart; always
 * cleaned up — by the test's `after` hook, and by a process exit hook if a test dies first.
 */
import { rmSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';
import {
  connect,
  credsAuthenticator,
  type NatsConnection,
  type NodeConnectionOptions,
} from '@nats-io/transport-node';
import {
  createKeyMaterial,
  type KeyMaterial,
  mintParticipantCreds,
  mintServiceCreds,
  mintSystemCreds,
  publicKeys,
  signServerJwts,
} from '@parley/keys';
import {
  findNatsServer,
  freePort,
  type NatsServerConfig,
  type NatsServerProcess,
  startNatsServer,
} from '@parley/nats-server';

/** How long a clustered node, and then the cluster's JetStream, may take to be ready. */
const CLUSTER_READY_MS = 90_000;

/** Options of {@link startServer}. */
export interface StartServerOptions {
  /** Operator-mode auth with generated keys (needed for permission tests). @default false */
  operator?: boolean;
  /** Number of nodes: 1, or 3 for a JetStream cluster. @default 1 */
  nodes?: 1 | 3;
  /** Operator-mode keys to use (e.g. a standalone home's) instead of generating new ones. */
  keys?: KeyMaterial;
  /** Seconds a client has to authenticate (operator mode). @default 10 (renderNatsConfig's) */
  authTimeoutSeconds?: number;
  /**
   * Cluster only: the route URLs of node `i` and the route address it advertises, given every
   * node's cluster port (the chaos test routes them through proxies it can cut). @default direct
   */
  routes?: (i: number, clusterPorts: readonly number[]) => Promise<{ routes: string[]; advertise?: string }>;
}

/** Operator-mode keys and creds minting of a test server. */
export interface TestOperator {
  keys: KeyMaterial;
  /** Creds of a Parley service (full access in the PARLEY account). */
  serviceCreds(name: string): Promise<string>;
  /** Creds of a participant, minted with the scoped key. */
  participantCreds(participantId: string): Promise<{ creds: string; userPublicKey: string }>;
  /** Creds of the system account user. */
  systemCreds(): Promise<string>;
}

/** A running test server or cluster. */
export interface TestServer {
  /** The temporary directory holding every node's data (removed by `stop`). */
  dir: string;
  /** The first node's URL. */
  url: string;
  /** Every node's URL. */
  urls: string[];
  /** Operator-mode helpers (when started with `operator: true`). */
  operator?: TestOperator;
  /** Connects; in operator mode, as a service unless `creds` is given. */
  connect(opts?: Partial<NodeConnectionOptions> & { creds?: string }): Promise<NatsConnection>;
  /** SIGKILL node `i` (its data stays). */
  kill9(i?: number): Promise<void>;
  /** SIGTERM node `i` (a graceful stop; its data stays). */
  stopNode(i: number): Promise<void>;
  /** The OS process id of node `i` while it runs (to pause it with SIGSTOP). */
  pid(i: number): number | undefined;
  /** Starts node `i` again with the same ports and data. */
  restart(i?: number): Promise<void>;
  /** Index of the node that leads stream `name`'s Raft group (cluster only). */
  streamLeader(name: string): Promise<number>;
  /** Stops every node and removes the temporary directory. */
  stop(): Promise<void>;
}

const live = new Set<{ dir: string; procs: (NatsServerProcess | undefined)[] }>();
process.once('exit', () => {
  for (const s of live) {
    for (const p of s.procs)
      if (p?.pid)
        try {
          process.kill(p.pid, 'SIGKILL');
        } catch {}
    rmSync(s.dir, { recursive: true, force: true });
  }
});

/** Starts nats-server (JetStream on) for a test. Call `stop()` in an `after` hook. */
export async function startServer(options: StartServerOptions = {}): Promise<TestServer> {
  const bin = await findNatsServer();
  if (!bin) throw new Error('nats-server not found: run npm test (it installs it) or set NATS_SERVER_BIN');
  const n = options.nodes ?? 1;
  const dir = await mkdtemp(join(tmpdir(), 'parley-test-'));
  const procs: (NatsServerProcess | undefined)[] = [];
  const entry = { dir, procs };
  live.add(entry);

  let operator: TestOperator | undefined;
  let operatorConfig: NatsServerConfig['operator'];
  if (options.operator || options.keys) {
    const keys = options.keys ?? createKeyMaterial('parley-test');
    const jwts = await signServerJwts(keys);
    const pub = publicKeys(keys);
    const operatorJwtPath = join(dir, 'operator.jwt');
    await writeFile(operatorJwtPath, jwts.operator);
    operatorConfig = {
      operatorJwtPath,
      systemAccount: pub.systemAccount,
      resolverDir: '',
      preload: { [pub.systemAccount]: jwts.systemAccount, [pub.account]: jwts.account },
    };
    operator = {
      keys,
      serviceCreds: async (name) => (await mintServiceCreds(keys, name)).creds,
      participantCreds: (id) => mintParticipantCreds(keys.participantSigningSeed, pub.account, id),
      systemCreds: async () => (await mintSystemCreds(keys)).creds,
    };
  }

  const clientPorts: number[] = [];
  const clusterPorts: number[] = [];
  for (let i = 0; i < n; i++) {
    clientPorts.push(await freePort());
    if (n > 1) clusterPorts.push(await freePort());
  }
  const routing = await Promise.all(
    clientPorts.map((_, i) =>
      n > 1 && options.routes
        ? options.routes(i, clusterPorts)
        : {
            routes: clusterPorts.filter((_, j) => j !== i).map((p) => `nats-route://127.0.0.1:${p}`),
          },
    ),
  );
  const configs: NatsServerConfig[] = clientPorts.map((port, i) => ({
    serverName: `n${i + 1}`,
    host: '127.0.0.1',
    port,
    storeDir: join(dir, `n${i + 1}`, 'jetstream'),
    maxMemory: '256MB',
    maxFile: '4GB',
    ...(options.authTimeoutSeconds ? { authTimeoutSeconds: options.authTimeoutSeconds } : {}),
    ...(operatorConfig
      ? { operator: { ...operatorConfig, resolverDir: join(dir, `n${i + 1}`, 'resolver') } }
      : {}),
    ...(n > 1
      ? {
          cluster: {
            name: 'parley-test',
            host: '127.0.0.1',
            port: clusterPorts[i] as number,
            ...(routing[i] as { routes: string[]; advertise?: string }),
          },
        }
      : {}),
  }));
  const startNode = (i: number) =>
    startNatsServer({
      bin,
      config: configs[i] as NatsServerConfig,
      configPath: join(dir, `n${i + 1}`, 'nats-server.conf'),
      logPath: join(dir, `n${i + 1}`, 'nats-server.log'),
      // A clustered node restarted with its data recovers every stream and consumer group before it
      // says it is ready: on a busy 2-core machine that took over 20 s (a node failing to start is
      // then a test failure about the machine, not about Parley).
      readyTimeoutMs: CLUSTER_READY_MS,
    });
  // A start that fails leaves nothing behind: a node left running keeps the test file's process
  // alive until the runner's timeout.
  const abandon = async (err: unknown): Promise<never> => {
    await Promise.allSettled(procs.map((p) => p?.kill9()));
    live.delete(entry);
    await rm(dir, { recursive: true, force: true });
    throw err;
  };
  const started = await Promise.allSettled(configs.map((_, i) => startNode(i)));
  for (const r of started) if (r.status === 'fulfilled') procs.push(r.value);
  const failed = started.find((r) => r.status === 'rejected');
  if (failed) await abandon(failed.reason);
  const urls = clientPorts.map((p) => `nats://127.0.0.1:${p}`);

  const connectTo = async (opts: Partial<NodeConnectionOptions> & { creds?: string } = {}) => {
    const { creds, ...rest } = opts;
    const useCreds = creds ?? (operator ? await operator.serviceCreds('test') : undefined);
    return connect({
      servers: urls,
      noAsyncTraces: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 100,
      ...(useCreds ? { authenticator: credsAuthenticator(new TextEncoder().encode(useCreds)) } : {}),
      ...(creds === undefined && operator ? { inboxPrefix: '_INBOX.svc_test' } : {}),
      ...rest,
    });
  };

  // A cluster is usable once JetStream has a meta leader that knows every node: until then an R3
  // stream fails with "no suitable peers for placement". Placing one is the test. A request sent
  // before the meta leader is elected is dropped unanswered, so the first attempts wait briefly
  // (250 ms, doubling to 2 s): with a fixed 2 s, every cluster start waited out one lost request
  // (2.6–2.9 s to ready on an idle machine; the meta leader was elected 0.4 s after the start).
  // An add that timed out yet was made is answered as made when tried again (same configuration).
  if (n > 1) {
    const nc = await connectTo();
    try {
      // Bounded by time, not by attempts: on a busy machine the peers can take well over 20 s to
      // find each other (as long as a node's own readiness, above).
      const deadline = Date.now() + CLUSTER_READY_MS;
      for (let attempt = 0; ; attempt++) {
        const timeout = Math.min(2000, 250 * 2 ** attempt);
        try {
          const jsm = await jetstreamManager(nc, { checkAPI: false, timeout });
          await jsm.streams.add({
            name: 'HARNESS_READY',
            subjects: ['harness.ready'],
            num_replicas: n,
            storage: StorageType.Memory,
          });
          await jsm.streams.delete('HARNESS_READY');
          break;
        } catch (err) {
          if (Date.now() > deadline) await abandon(err);
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    } finally {
      await nc.close();
    }
  }

  return {
    dir,
    url: urls[0] as string,
    urls,
    ...(operator ? { operator } : {}),
    connect: connectTo,
    async kill9(i = 0) {
      await procs[i]?.kill9();
      procs[i] = undefined;
    },
    async stopNode(i) {
      await procs[i]?.stop(10_000);
      procs[i] = undefined;
    },
    pid: (i) => procs[i]?.pid,
    async restart(i = 0) {
      if (procs[i]) throw new Error(`node ${i} is running`);
      procs[i] = await startNode(i);
    },
    async streamLeader(name) {
      const nc = await connectTo();
      try {
        const info = await (await jetstreamManager(nc)).streams.info(name);
        const leader = info.cluster?.leader;
        const idx = configs.findIndex((c) => c.serverName === leader);
        if (idx < 0) throw new Error(`no leader for ${name}`);
        return idx;
      } finally {
        await nc.close();
      }
    },
    async stop() {
      await Promise.allSettled(procs.map((p) => p?.stop(5_000)));
      live.delete(entry);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export { freePort } from '@parley/nats-server';
export * from './a2a.js';
export * from './backbone-process.js';
export * from './errors.js';
export * from './log.js';
export * from './otlp.js';
export * from './parley.js';
export * from './participants.js';
export * from './processes.js';
export * from './prometheus.js';
export * from './proxy.js';
export * from './recovery.js';
export * from './store.js';
export { waitFor, within } from './wait.js';
