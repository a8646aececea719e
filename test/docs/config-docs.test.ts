import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { CONFIG_DOCS_PATH, renderConfigDocs } from './config-docs.js';

describe('docs/configuration.md', () => {
  it('is what the config schemas generate (run `pnpm generate` after changing a config.ts)', () => {
    const committed = readFileSync(new URL(`../../${CONFIG_DOCS_PATH}`, import.meta.url), 'utf8');
    assert.equal(committed, renderConfigDocs());
  });

  it('documents every variable with a meaning', () => {
    const rows = renderConfigDocs()
      .split('\n')
      .filter((l) => l.startsWith('| `'));
    assert.ok(rows.length > 40, `${rows.length} variables`);
    for (const row of rows) assert.doesNotMatch(row, /\|\s*\|\s*$/, `no meaning: ${row}`);
  });
});
