/**
 * The peer a user would pick instead: A2A JSON-RPC over HTTP with the official @a2a-js/sdk, an echo
 * agent on loopback (no persistence, no fan-out), measured with the SDK's own client.
 */
import { ClientFactory } from '@a2a-js/sdk/client';
import { startEchoServer, userMessage } from './a2a-echo.js';
import { percentiles, progress } from './stats.js';

export interface A2aResult {
  perSec: number;
  roundTripMs: { p50: number; p99: number };
}

export async function benchA2a(o: {
  payloadBytes: number;
  sequential: number;
  concurrency: number;
  seconds: number;
}): Promise<A2aResult> {
  const echo = await startEchoServer();
  const client = await new ClientFactory().createFromUrl(echo.base);
  const payload = 'x'.repeat(o.payloadBytes);
  const params = () => ({
    tenant: '',
    message: userMessage(payload),
    configuration: undefined,
    metadata: undefined,
  });

  for (let i = 0; i < 200; i++) await client.sendMessage(params());
  const rtts: number[] = [];
  for (let i = 0; i < o.sequential; i++) {
    const t = performance.now();
    await client.sendMessage(params());
    rtts.push(performance.now() - t);
  }
  const rt = percentiles(rtts);
  progress(`a2a: sequential round trip p50 ${rt.p50} ms p99 ${rt.p99} ms`);
  let done = 0;
  const deadline = performance.now() + o.seconds * 1000;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: o.concurrency }, async () => {
      while (performance.now() < deadline) {
        await client.sendMessage(params());
        done++;
      }
    }),
  );
  const perSec = Math.round(done / ((performance.now() - start) / 1000));
  progress(`a2a: ${o.concurrency} concurrent clients ${perSec} msg/s`);
  await echo.close();
  return { perSec, roundTripMs: { p50: rt.p50, p99: rt.p99 } };
}
