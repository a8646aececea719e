/**
 * Network partitions on loopback without root: every route connection between two nodes of the test
 * cluster goes through a TCP proxy this module owns, one proxy per ordered pair (node i dialling
 * node j connects to proxy i→j, which forwards to j's cluster port). Cutting node k resets every
 * connection of the proxies k→* and *→k, and holds new ones unanswered (as a network that drops
 * packets would) until it is healed, when they are closed and the nodes redial; nothing else on the
 * machine is touched, and closing the proxies leaves nothing behind.
 *
 * NATS gossips route addresses (a node tells the others where a newly joined peer listens, and they
 * dial it directly): that would bypass the proxies. Each node therefore advertises the address of a
 * "black hole" listener that closes whatever connects, so a gossiped route always fails and the
 * configured routes — the proxied ones, a full mesh — are the only routes there are.
 */
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';

/** One ordered pair's proxy. */
class RouteProxy {
  readonly sockets = new Set<Socket>();
  /** Connections that arrived while cut: never answered, closed when healed. */
  readonly held = new Set<Socket>();
  cut = false;
  readonly server: Server;
  constructor(
    readonly from: number,
    readonly to: number,
    target: () => number,
  ) {
    this.server = createServer((inbound) => {
      if (this.cut) {
        // Held without an answer, as a dropped network would: refused at once, a node redials
        // dozens of times a second.
        inbound.on('error', () => {});
        this.held.add(inbound);
        inbound.once('close', () => this.held.delete(inbound));
        return;
      }
      const outbound = tcpConnect({ host: '127.0.0.1', port: target() });
      for (const s of [inbound, outbound]) {
        this.sockets.add(s);
        // A reset or refused connection ends the pair; NATS reconnects the route by itself.
        s.on('error', () => {});
        s.on('close', () => {
          this.sockets.delete(s);
          inbound.destroy();
          outbound.destroy();
        });
      }
      inbound.pipe(outbound);
      outbound.pipe(inbound);
    });
  }
  listen(): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen({ port: 0, host: '127.0.0.1' }, () => {
        const a = this.server.address();
        resolve(typeof a === 'object' && a ? a.port : 0);
      });
    });
  }
  sever(): void {
    this.cut = true;
    for (const s of this.sockets) s.destroy();
  }
  mend(): void {
    this.cut = false;
    for (const s of this.held) s.destroy();
  }
}

/** The route proxies of a 3-node test cluster. */
export class RoutePartitions {
  readonly #proxies: RouteProxy[] = [];
  readonly #ports = new Map<RouteProxy, number>();
  #blackHole: Server | undefined;
  #blackHolePort = 0;
  #clusterPorts: readonly number[] = [];

  /** For `startParley({ routes })`: node `i`'s routes through the proxies, and the black hole it advertises. */
  readonly routes = async (i: number, clusterPorts: readonly number[]) => {
    this.#clusterPorts = clusterPorts;
    if (!this.#blackHole) {
      this.#blackHole = createServer((s) => s.destroy());
      this.#blackHolePort = await new Promise<number>((resolve, reject) => {
        const bh = this.#blackHole as Server;
        bh.once('error', reject);
        bh.listen({ port: 0, host: '127.0.0.1' }, () => {
          const a = bh.address();
          resolve(typeof a === 'object' && a ? a.port : 0);
        });
      });
    }
    const routes: string[] = [];
    for (let j = 0; j < clusterPorts.length; j++) {
      if (j === i) continue;
      const proxy = new RouteProxy(i, j, () => this.#clusterPorts[j] as number);
      this.#proxies.push(proxy);
      const port = await proxy.listen();
      this.#ports.set(proxy, port);
      routes.push(`nats-route://127.0.0.1:${port}`);
    }
    return { routes, advertise: `127.0.0.1:${this.#blackHolePort}` };
  };

  /** Open route connections through the proxies of node `k` (both directions). */
  connections(k: number): number {
    let n = 0;
    for (const p of this.#proxies) if (p.from === k || p.to === k) n += p.sockets.size / 2;
    return n;
  }

  /** Cuts node `k` off from the other nodes: its route connections close and new ones are refused. */
  cut(k: number): void {
    for (const p of this.#proxies) if (p.from === k || p.to === k) p.sever();
  }

  /** Lets node `k`'s routes connect again (the nodes redial by themselves). */
  heal(k: number): void {
    for (const p of this.#proxies) if (p.from === k || p.to === k) p.mend();
  }

  /** Closes every proxy and the black hole. */
  async close(): Promise<void> {
    const servers = [...this.#proxies.map((p) => p.server), ...(this.#blackHole ? [this.#blackHole] : [])];
    for (const p of this.#proxies) {
      p.sever();
      p.mend();
    }
    await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
  }
}
