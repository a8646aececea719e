#!/usr/bin/env node
/** `parley-init keys|backbone`: what a deployment runs before its services (a Job, a compose one-shot). */
import { createLogger } from '@parley/kit';
import { parseInit, runInit } from './run.js';

let parsed: ReturnType<typeof parseInit>;
try {
  parsed = parseInit(process.argv.slice(2), process.env);
} catch (err) {
  process.stderr.write(`${(err as Error).message}\n`);
  process.exit(2);
}
const log = createLogger({ name: 'parley-init', level: parsed.config.LOG_LEVEL });
try {
  await runInit(parsed.command, parsed.config, log);
  process.exit(0);
} catch (err) {
  log.error({ err }, `parley-init ${parsed.command} failed`);
  process.exit(1);
}
