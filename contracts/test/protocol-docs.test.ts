import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { Parser } from '@asyncapi/parser';
import { ERROR_CODES } from '@parley/contracts';
import { generateProtocolDocs } from '../scripts/protocol-docs.js';

const root = resolve(import.meta.dirname, '../..');
const files = generateProtocolDocs();

describe('generated protocol documents', () => {
  it('are committed exactly as the contracts generate them (run `pnpm generate` after a contract change)', async () => {
    const drifted: string[] = [];
    for (const [path, content] of files) {
      const committed = await readFile(join(root, path), 'utf8').catch(() => '(missing)');
      if (committed !== content) drifted.push(path);
    }
    assert.deepEqual(drifted, [], `out of date: ${drifted.join(', ')}`);
  });

  it('include no schema file the contracts no longer define', async () => {
    const { readdir } = await import('node:fs/promises');
    const onDisk = await readdir(join(root, 'docs/protocol/schemas'));
    const stale = onDisk.filter((f) => !files.has(`docs/protocol/schemas/${f}`));
    assert.deepEqual(stale, []);
  });

  it('contain an AsyncAPI 3.0 document that @asyncapi/parser accepts without errors or warnings', async () => {
    const yaml = files.get('docs/protocol/asyncapi.yaml');
    assert.ok(yaml);
    const { document, diagnostics } = await new Parser().parse(yaml);
    // Severity 0 = error, 1 = warning; 2 (info) only suggests AsyncAPI 3.1.
    const problems = diagnostics
      .filter((d) => d.severity < 2)
      .map((d) => `${d.code}: ${d.message} at ${d.path.join('.')}`);
    assert.deepEqual(problems, []);
    assert.ok(document);
    assert.equal(document.version(), '3.0.0');
    const addresses = document
      .channels()
      .all()
      .map((c) => c.address());
    for (const expected of [
      'parley.in.{participantId}.send',
      'parley.room.{partition}.{roomId}',
      'parley.inbox.{shard}.{participantId}.{roomId}',
      'parley.in.{callerId}.api.rooms.create',
      'parley.in.{callerId}.api.registry.discover',
    ]) {
      assert.ok(addresses.includes(expected), `missing channel ${expected}`);
    }
    const send = document.operations().get('send');
    assert.ok(send?.reply(), 'send is request/reply');
  });

  it('document every error code in docs/errors.md', () => {
    const md = files.get('docs/errors.md') ?? '';
    for (const code of ERROR_CODES) assert.match(md, new RegExp(`\\| \`${code}\` \\|`));
  });
});
