/**
 * The OpenAPI document: generated from the route table and the contracts, valid OpenAPI 3.1,
 * committed as docs/gateway/openapi.json (a drift test, like the protocol docs), served at
 * /openapi.json and rendered at /docs.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startParley, type TestParley } from '@parley/test/harness';
import { Validator } from '@seriousme/openapi-schema-validator';
import { openApiDocument } from '../src/openapi.js';
import { restRoutes } from '../src/routes.js';

const committed = join(import.meta.dirname, '../../../docs/gateway/openapi.json');

describe('gateway OpenAPI', () => {
  let parley: TestParley;
  before(async () => {
    parley = await startParley();
  });
  after(async () => {
    await parley?.destroy();
  });

  it('is valid OpenAPI 3.1', async () => {
    const result = await new Validator().validate(openApiDocument() as never);
    assert.equal(result.valid, true, JSON.stringify(result.errors, null, 2));
  });

  it('matches the committed docs/gateway/openapi.json (run pnpm generate after changing routes or contracts)', async () => {
    const onDisk = JSON.parse(await readFile(committed, 'utf8'));
    assert.deepEqual(onDisk, JSON.parse(JSON.stringify(openApiDocument())));
  });

  it('documents every REST route with its contract method', () => {
    const doc = openApiDocument() as {
      paths: Record<string, Record<string, { 'x-parley-method'?: string }>>;
    };
    for (const r of restRoutes) {
      const op = doc.paths[r.url.replaceAll(/:(\w+)/g, '{$1}')]?.[r.method.toLowerCase()];
      assert.ok(op, `${r.method} ${r.url}`);
      if (r.api) assert.equal(op['x-parley-method'], `${r.api.service}.${r.api.method}`);
    }
  });

  it('is served at /openapi.json with the server URL, and readable at /docs', async () => {
    const res = await fetch(`${parley.httpUrl}/openapi.json`);
    assert.equal(res.status, 200);
    const doc = (await res.json()) as { servers: { url: string }[]; paths: Record<string, unknown> };
    assert.equal(doc.servers[0]?.url, parley.httpUrl);
    assert.ok(doc.paths['/v1/rooms/{room}/messages']);
    const html = await (await fetch(`${parley.httpUrl}/docs`)).text();
    assert.match(html, /<h1>Parley gateway API<\/h1>/);
    assert.match(html, /\/v1\/rooms\/\{room\}\/messages/);
  });
});
