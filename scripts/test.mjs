// npm test: the same bootstrap as npm start, then build, lint (format + types), every test, and the
// cross-service tests once more against a 3-node JetStream cluster.
import { BootstrapError, bootstrap, ensureChromium, pnpmOrExit } from './bootstrap.mjs';

const started = Date.now();
let tools;
try {
  tools = bootstrap();
  tools.chromium = ensureChromium();
} catch (err) {
  process.stderr.write(`\n${err instanceof BootstrapError ? err.message : err.stack}\n`);
  process.exit(1);
}
const env = { NATS_SERVER_BIN: tools.natsServer, CHROMIUM_BIN: tools.chromium };
pnpmOrExit(tools.pnpm, ['run', 'build'], env);
pnpmOrExit(tools.pnpm, ['run', 'lint'], env);
pnpmOrExit(tools.pnpm, ['run', 'test:run', ...process.argv.slice(2)], env);
// The cross-service suite again, on a 3-node JetStream cluster (R3 streams, R1 inbox consumers), unless
// particular tests were asked for.
if (process.argv.length <= 2) pnpmOrExit(tools.pnpm, ['run', 'test:cluster'], env);
process.stderr.write(`npm test finished in ${((Date.now() - started) / 1000).toFixed(0)} s\n`);
