import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';

/** A TCP proxy in front of nats-server that can drop a message on its way to the client. */
export interface CuttingProxy {
  /** The URL to connect a client to instead of nats-server's. */
  readonly url: string;
  /**
   * Cut the client's connection at the next server bytes containing `marker` (and `alongWith`,
   * when given: e.g. the deliver subject of one consumer), without passing them on.
   */
  arm(marker: string, alongWith?: string): void;
  /** How many connections were cut so far. */
  cuts(): number;
  close(): Promise<void>;
}

/**
 * Starts a {@link CuttingProxy} to `target`. Once armed, it cuts a client's connection when the
 * server sends bytes with the marker: the server counts that message as delivered, the client never
 * sees it — a delivery lost in transit, as when nats-server is killed -9. The client reconnects
 * through the proxy.
 */
export async function cuttingProxy(target: URL): Promise<CuttingProxy> {
  let armed: { marker: string; alongWith?: string | undefined } | undefined;
  let cuts = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = tcpConnect(Number(target.port), target.hostname);
    sockets.add(client);
    sockets.add(upstream);
    const close = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
    client.on('data', (b) => upstream.write(b));
    upstream.on('data', (b: Buffer) => {
      if (
        armed &&
        b.includes(armed.marker) &&
        (armed.alongWith === undefined || b.includes(armed.alongWith))
      ) {
        armed = undefined;
        cuts++;
        close();
        return;
      }
      client.write(b);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `nats://127.0.0.1:${port}`,
    arm(marker, alongWith) {
      armed = { marker, alongWith };
    },
    cuts: () => cuts,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}
