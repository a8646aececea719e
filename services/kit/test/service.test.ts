import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { packageVersion } from '@parley/kit';

describe('packageVersion', () => {
  it('reads the version of the nearest package.json above the module, from src/ as from dist/', () => {
    const dir = mkdtempSync(join(tmpdir(), 'parley-pkg-'));
    try {
      writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'x', version: '3.7.1-rc.2' }));
      mkdirSync(join(dir, 'dist', 'deep'), { recursive: true });
      assert.equal(packageVersion(pathToFileURL(join(dir, 'src', 'service.js')).href), '3.7.1-rc.2');
      assert.equal(packageVersion(pathToFileURL(join(dir, 'dist', 'deep', 'service.js')).href), '3.7.1-rc.2');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('says which module had no package.json above it', () => {
    assert.throws(
      () => packageVersion('file:///no-such-dir/x.js'),
      /no package\.json above file:\/\/\/no-such-dir\/x\.js/,
    );
  });
});
