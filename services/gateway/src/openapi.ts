/**
 * The OpenAPI 3.1 document of the gateway, generated from the route table and the zod contracts
 * (`z.toJSONSchema`, JSON Schema 2020-12 as OpenAPI 3.1 uses it), served at `/openapi.json`, with
 * a readable reference at `/docs` rendered from the same document (no external assets). The
 * committed copy `docs/gateway/openapi.json` is checked against it by a test.
 */
import type { FastifyInstance } from 'fastify';
import * as z from 'zod';
import { Problem } from './problem.js';
import { type RestRoute, restRoutes } from './routes.js';

type Json = Record<string, unknown>;

function schemaOf(schema: z.ZodType, io: 'input' | 'output'): Json {
  const out = z.toJSONSchema(schema, { io, unrepresentable: 'any', target: 'draft-2020-12' }) as Json;
  delete out.$schema;
  return out;
}

const problemResponse = (description: string) => ({
  description,
  content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } },
});

/** The route's response body: its own, or its contract method's. */
function responseOf(route: RestRoute): z.ZodType {
  const schema = route.response ?? route.api?.response;
  if (!schema) throw new Error(`${route.method} ${route.url}: neither a response nor a contract method`);
  return schema;
}

function operation(route: RestRoute): Json {
  const parameters = route.params.map((p) => ({
    name: p.name,
    in: p.in,
    required: p.in === 'path',
    description: p.description,
    schema: { type: p.type },
  }));
  if (route.url === '/v1/rooms/:room/messages' && route.method === 'POST') {
    parameters.push({
      name: 'Idempotency-Key',
      in: 'header' as never,
      required: false,
      description: 'A retry with the same key is stored once (the client message id).',
      schema: { type: 'string' },
    });
  }
  return {
    operationId: `${route.method.toLowerCase()}${route.url
      .replaceAll(/[:/](\w)/g, (_m, c: string) => c.toUpperCase())
      .replaceAll(/[^A-Za-z0-9]/g, '')}`,
    summary: route.summary,
    tags: [route.tag],
    ...(route.api ? { 'x-parley-method': `${route.api.service}.${route.api.method}` } : {}),
    'x-parley-scope': route.scope,
    ...(parameters.length ? { parameters } : {}),
    ...(route.body
      ? {
          requestBody: {
            required: true,
            content: { 'application/json': { schema: schemaOf(route.body, 'input') } },
          },
        }
      : {}),
    responses: {
      [String(route.status ?? 200)]: {
        description: 'OK',
        content: { 'application/json': { schema: schemaOf(responseOf(route), 'output') } },
      },
      '400': problemResponse('INVALID_ARGUMENT: the request does not match the contract'),
      '401': problemResponse('UNAUTHENTICATED, EXPIRED or REVOKED credentials'),
      '403': problemResponse('PERMISSION_DENIED, NOT_A_MEMBER, NO_CONSENT, SUSPENDED, …'),
      '413': problemResponse('PAYLOAD_TOO_LARGE: nothing was written'),
      default: problemResponse('Any other Parley error (docs/errors.md)'),
    },
  };
}

/** The OpenAPI document (without `servers`, which depend on where it is served). */
export function openApiDocument(): Json {
  const paths: Record<string, Json> = {};
  for (const route of restRoutes) {
    const p = route.url.replaceAll(/:(\w+)/g, '{$1}');
    paths[p] = { ...(paths[p] ?? {}), [route.method.toLowerCase()]: operation(route) };
  }
  paths['/v1/stream'] = {
    get: {
      operationId: 'getV1Stream',
      summary:
        'WebSocket (Upgrade): the caller’s inbox, in order. Each frame is {"type":"message","id":"<room>:<seq>",…}; a delivery is acknowledged only after it was written to the socket. Reconnect with ?after=<room>:<seq>,… (the last id handled per room) to resume: nothing lost, nothing twice.',
      tags: ['stream'],
      'x-parley-scope': 'read',
      parameters: [
        {
          name: 'after',
          in: 'query',
          required: false,
          description: 'Comma-separated <room>:<seq> positions already handled.',
          schema: { type: 'string' },
        },
      ],
      responses: {
        '101': { description: 'Switching protocols' },
        '401': problemResponse('Not authenticated'),
      },
    },
  };
  paths['/v1/stream/sse'] = {
    get: {
      operationId: 'getV1StreamSse',
      summary:
        'Server-sent events variant of /v1/stream for clients that cannot do WebSocket; resumes from Last-Event-ID.',
      tags: ['stream'],
      'x-parley-scope': 'read',
      responses: {
        '200': { description: 'text/event-stream of deliveries', content: { 'text/event-stream': {} } },
        '401': problemResponse('Not authenticated'),
      },
    },
  };
  paths['/v1/hooks/{hookId}'] = {
    post: {
      operationId: 'postV1Hook',
      summary:
        'Inbound webhook: the body becomes a message of the hook’s bridge agent. Signed with Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature) or X-Hub-Signature-256; CloudEvents 1.0 binary and structured mode accepted. Bad or missing signature or a timestamp older than 5 minutes: 401, nothing written. The same event id twice is stored once.',
      tags: ['hooks'],
      security: [],
      parameters: [{ name: 'hookId', in: 'path', required: true, schema: { type: 'string' } }],
      requestBody: {
        required: true,
        content: { 'application/json': {}, 'application/cloudevents+json': {} },
      },
      responses: {
        '202': { description: 'Accepted and stored (or a duplicate of a stored event)' },
        '401': problemResponse('Bad or missing signature, or a stale timestamp'),
        '413': problemResponse('Body too large'),
      },
    },
  };
  paths['/v1/login'] = {
    get: {
      operationId: 'getV1Login',
      summary:
        'Redeem a one-time login link (printed by npm start): sets the session cookie and returns a bearer token.',
      tags: ['me'],
      security: [],
      parameters: [{ name: 'code', in: 'query', required: true, schema: { type: 'string' } }],
      responses: { '200': { description: 'The session' }, '401': problemResponse('Unknown or used link') },
    },
  };
  return {
    openapi: '3.1.0',
    info: {
      title: 'Parley gateway',
      version: '0.1.0',
      description:
        'Parley over HTTP: the same contracts, refusals and error codes as over NATS. Authenticate with an API key (parley key create), an OIDC token of the configured issuer, or a login session.',
    },
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    security: [{ bearer: [] }],
    paths,
    components: {
      securitySchemes: {
        bearer: {
          type: 'http',
          scheme: 'bearer',
          description:
            'An API key (pak_…), a session (ses_…) or an OIDC token (JWT) of the configured issuer.',
        },
      },
      schemas: { Problem: schemaOf(Problem, 'output') },
    },
  };
}

function escapeHtml(text: string): string {
  return text.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;');
}

/** The readable reference: one section per path and method, with parameters and body schemas. */
export function docsHtml(doc: Json): string {
  const sections: string[] = [];
  for (const [p, methods] of Object.entries(doc.paths as Record<string, Record<string, Json>>)) {
    for (const [method, op] of Object.entries(methods)) {
      const params = ((op.parameters as Json[] | undefined) ?? [])
        .map(
          (x) =>
            `<li><code>${escapeHtml(String(x.name))}</code> (${x.in}) ${escapeHtml(String(x.description ?? ''))}</li>`,
        )
        .join('');
      const body = (op.requestBody as { content?: Record<string, { schema?: unknown }> } | undefined)
        ?.content?.['application/json']?.schema;
      sections.push(
        `<section id="${escapeHtml(String(op.operationId))}"><h3><span class="m">${method.toUpperCase()}</span> <code>${escapeHtml(p)}</code></h3><p>${escapeHtml(String(op.summary ?? ''))}</p>${
          params ? `<ul>${params}</ul>` : ''
        }${body ? `<details><summary>Body</summary><pre>${escapeHtml(JSON.stringify(body, null, 2))}</pre></details>` : ''}</section>`,
      );
    }
  }
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Parley gateway API</title><style>body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}.m{font:600 12px monospace;background:#eef;padding:2px 6px;border-radius:4px}pre{background:#f6f6f6;padding:.5rem;overflow:auto;font-size:12px}section{border-top:1px solid #ddd}</style></head><body><h1>Parley gateway API</h1><p>${escapeHtml(
    String((doc.info as Json).description),
  )} Machine-readable: <a href="/openapi.json">/openapi.json</a>. Errors: <code>application/problem+json</code> with the Parley <code>code</code>.</p>${sections.join('')}</body></html>`;
}

/** Registers `/openapi.json` and `/docs`. */
export async function registerDocs(
  app: FastifyInstance,
  o: { config: { PARLEY_GATEWAY_PUBLIC_URL?: string | undefined } },
) {
  const base = openApiDocument();
  const doc = o.config.PARLEY_GATEWAY_PUBLIC_URL
    ? { ...base, servers: [{ url: o.config.PARLEY_GATEWAY_PUBLIC_URL }] }
    : base;
  const html = docsHtml(doc);
  await app.register(async (docs) => {
    docs.get('/openapi.json', async (_req, reply) => reply.send(doc));
    docs.get('/docs', async (_req, reply) => reply.type('text/html; charset=utf-8').send(html));
  });
}
