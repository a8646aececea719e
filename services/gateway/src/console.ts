/**
 * The console (the people's web app, package `console/`) served at `/`: its built files, and
 * `/console/config.json` with what the page needs to know that is not an API call (the Jaeger
 * link). The console itself talks only to `/v1` and `/v1/stream`, like any other client.
 */
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance } from 'fastify';
import type { GatewayService } from './service.js';

/** Where the built console is by default: `console/dist` of this checkout (from src/ and dist/ alike). */
export const defaultConsoleDir = resolve(dirname(fileURLToPath(import.meta.url)), '../../../console/dist');

// The page loads only its own scripts and styles and talks only to this origin (fetch, WebSocket).
const CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "connect-src 'self' ws: wss:",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'self'",
].join('; ');

/** Registers `/` (the console) and `/console/config.json`. */
export async function registerConsole(app: FastifyInstance, service: GatewayService): Promise<void> {
  const dir = service.config.PARLEY_CONSOLE_DIR ?? defaultConsoleDir;
  const jaeger = service.config.PARLEY_JAEGER_URL?.replace(/\/$/, '');
  app.get('/console/config.json', async () => ({ ...(jaeger ? { jaegerUrl: jaeger } : {}) }));
  if (!existsSync(join(dir, 'index.html'))) {
    app.get('/', async (_req, reply) =>
      reply
        .code(503)
        .type('text/plain; charset=utf-8')
        .send(`The console is not built (${dir}): run \`pnpm --filter @parley/console build\`.\n`),
    );
    return;
  }
  await app.register(fastifyStatic, {
    root: dir,
    prefix: '/',
    // Only the files that exist: anything else under / stays the gateway's 404 (problem+json).
    wildcard: false,
    index: ['index.html'],
    // The build writes .gz next to each asset (console/vite.config.ts).
    preCompressed: true,
    setHeaders: (reply, path) => {
      void reply.headers({
        'content-security-policy': CSP,
        'x-content-type-options': 'nosniff',
        'referrer-policy': 'no-referrer',
        // Hashed asset names never change content; index.html must be revalidated.
        'cache-control': path.includes('/assets/') ? 'public, max-age=31536000, immutable' : 'no-cache',
      });
    },
  });
}
