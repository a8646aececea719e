// npm start: bootstrap, build, then the local backbone (flags after `--` go to it: npm start -- --help).
import { join } from 'node:path';
import { BootstrapError, bootstrap, pnpmOrExit, root } from './bootstrap.mjs';

let tools;
try {
  tools = bootstrap();
} catch (err) {
  process.stderr.write(`\n${err instanceof BootstrapError ? err.message : err.stack}\n`);
  process.exit(1);
}
pnpmOrExit(tools.pnpm, ['run', '--silent', 'build']);
process.env.NATS_SERVER_BIN ??= tools.natsServer;
// In this process, so Ctrl-C reaches the backbone directly and it shuts down in order.
await import(join(root, 'services/standalone/dist/main.js'));
