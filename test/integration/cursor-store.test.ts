/**
 * The file cursor store: positions survive reopening (a restart), the highest per room wins, and the
 * file is compacted to one line per room when opened.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileCursorStore } from '@parley/sdk';

describe('fileCursorStore', () => {
  let dir = '';
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'parley-cursor-'));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('keeps the last handled position per room across a reopen, compacted to one line per room', async () => {
    const path = join(dir, 'cursor.log');
    const first = fileCursorStore(path);
    assert.equal(first.get('room_a'), undefined);
    for (let seq = 1; seq <= 50; seq++) first.set('room_a', seq);
    first.set('room_b', 7);
    // What a kill -9 leaves: every set already on disk, no close needed.
    const reopened = fileCursorStore(path);
    assert.equal(reopened.get('room_a'), 50);
    assert.equal(reopened.get('room_b'), 7);
    assert.deepEqual((await readFile(path, 'utf8')).trim().split('\n').sort(), ['room_a 50', 'room_b 7']);
  });

  it('ignores a torn last line (a crash mid-append) and refuses a file it cannot read', async () => {
    const path = join(dir, 'torn.log');
    await writeFile(path, 'room_a 3\nroom_a 4\nroom_');
    assert.equal(fileCursorStore(path).get('room_a'), 4);
    assert.throws(() => fileCursorStore(dir), { code: 'EISDIR' });
  });
});
