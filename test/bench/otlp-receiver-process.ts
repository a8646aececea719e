/**
 * The OTLP receiver in a process of its own, as a collector would be: prints its URL, and on
 * SIGTERM the number of spans it received, then exits. Used by bench/tracing.ts.
 */
import { startOtlpReceiver } from '../harness/otlp.js';

const receiver = await startOtlpReceiver();
process.stdout.write(`${receiver.url}\n`);
process.once('SIGTERM', () => {
  process.stdout.write(`spans ${receiver.spans.length}\n`);
  void receiver.close().then(() => process.exit(0));
});
