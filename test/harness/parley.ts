import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BackboneOptions } from '@parley/contracts';
import { type Logger, silentLogger } from '@parley/kit';
import { freePort, type Standalone, type StandaloneOptions, startStandalone } from '@parley/standalone';

/** A whole Parley (nats-server + every service) for a test, in a temporary home. */
export interface TestParley extends Standalone {
  /** Stops everything and removes the home directory. */
  destroy(): Promise<void>;
}

/** Starts the standalone backbone on free ports in a temporary home. */
export async function startParley(
  options: {
    backbone?: BackboneOptions;
    log?: Logger;
    /** `OTEL_*` settings, e.g. `loadTelemetryConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url })`. */
    telemetry?: StandaloneOptions['telemetry'];
    telemetryBatch?: StandaloneOptions['telemetryBatch'];
  } = {},
): Promise<TestParley> {
  const home = await mkdtemp(join(tmpdir(), 'parley-home-'));
  try {
    const parley = await startStandalone({
      home,
      natsPort: await freePort(),
      httpPort: await freePort(),
      log: options.log ?? silentLogger(),
      ...(options.backbone ? { backbone: options.backbone } : {}),
      ...(options.telemetry ? { telemetry: options.telemetry } : {}),
      ...(options.telemetryBatch ? { telemetryBatch: options.telemetryBatch } : {}),
    });
    return {
      ...parley,
      async destroy() {
        await parley.stop();
        await rm(home, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await rm(home, { recursive: true, force: true });
    throw err;
  }
}
