import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';

type InstallState = (dir: string, pnpmVersion: string) => string | undefined;
const bootstrapUrl = pathToFileURL(resolve(import.meta.dirname, '../../scripts/bootstrap.mjs')).href;

const dirs: string[] = [];
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

/** A workspace as the bootstrap sees it: lockfile, package.json files, installed node_modules. */
async function workspace(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'parley-stamp-'));
  dirs.push(dir);
  await writeFile(
    join(dir, 'pnpm-workspace.yaml'),
    'packages:\n  - sdk\n  - services/*\nonlyBuiltDependencies:\n  - esbuild\n',
  );
  await writeFile(join(dir, 'package.json'), '{"name":"root"}\n');
  await writeFile(join(dir, 'pnpm-lock.yaml'), "lockfileVersion: '9.0'\n");
  for (const pkg of ['sdk', 'services/rooms', 'services/kit']) {
    await mkdir(join(dir, pkg, 'node_modules'), { recursive: true });
    await writeFile(join(dir, pkg, 'package.json'), `{"name":"${pkg}","dependencies":{"zod":"^4"}}\n`);
  }
  // A package without dependencies has no node_modules of its own, and needs none.
  await mkdir(join(dir, 'services', 'docs'), { recursive: true });
  await writeFile(join(dir, 'services', 'docs', 'package.json'), '{"name":"docs"}\n');
  await mkdir(join(dir, 'node_modules'), { recursive: true });
  await writeFile(join(dir, 'node_modules', '.modules.yaml'), 'layoutVersion: 5\n');
  return dir;
}

describe('the bootstrap’s install stamp', () => {
  it('is the same while nothing changed, and differs when the lockfile, a package.json or node_modules did', async () => {
    const { installState } = (await import(bootstrapUrl)) as { installState: InstallState };
    const dir = await workspace();
    const before = installState(dir, '10.34.8');
    assert.ok(before);
    assert.equal(installState(dir, '10.34.8'), before, 'nothing changed: the install is skipped');
    assert.notEqual(installState(dir, '10.35.0'), before, 'another pnpm installs again');

    await writeFile(join(dir, 'pnpm-lock.yaml'), "lockfileVersion: '9.0'\n# changed\n");
    const lockChanged = installState(dir, '10.34.8');
    assert.notEqual(lockChanged, before);

    await writeFile(join(dir, 'services/kit/package.json'), '{"name":"kit","dependencies":{"x":"1"}}\n');
    const pkgChanged = installState(dir, '10.34.8');
    assert.notEqual(pkgChanged, lockChanged);

    // `pnpm add` or an install by hand rewrites .modules.yaml.
    const later = new Date(Date.now() + 5000);
    await utimes(join(dir, 'node_modules', '.modules.yaml'), later, later);
    assert.notEqual(installState(dir, '10.34.8'), pkgChanged);

    // A package's node_modules removed: no stamp can match, the install runs.
    await rm(join(dir, 'services/rooms/node_modules'), { recursive: true });
    assert.equal(installState(dir, '10.34.8'), undefined);
    await rm(join(dir, 'node_modules'), { recursive: true });
    assert.equal(installState(dir, '10.34.8'), undefined);
  });
});
