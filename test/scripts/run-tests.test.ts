import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';

const root = resolve(import.meta.dirname, '../..');

/** Runs a script of `scripts/` with `args`; resolves with its exit code and output. */
async function script(name: string, args: string[], extraEnv: Record<string, string> = {}) {
  // As from a shell: not as a child of this test runner (NODE_TEST_CONTEXT would make the script's
  // own run() report to this process), and with the runner's default concurrency.
  const { NODE_TEST_CONTEXT: _, PARLEY_TEST_CONCURRENCY: __, ...env } = process.env;
  const child = spawn(process.execPath, [join(root, 'scripts', name), ...args], {
    cwd: root,
    env: { ...env, ...extraEnv },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b: Buffer) => {
    stdout += b.toString();
  });
  child.stderr.on('data', (b: Buffer) => {
    stderr += b.toString();
  });
  const [code] = (await once(child, 'close')) as [number];
  return { code, stdout, stderr };
}

describe('pnpm test:run', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'parley-run-tests-'));
    // The slow file waits on a timer: its length is what the summary is to report.
    await writeFile(
      join(dir, 'slow.test.ts'),
      "import { test } from 'node:test';\ntest('slow', () => new Promise<void>((r) => setTimeout(r, 3000)));\n",
    );
    await writeFile(
      join(dir, 'quick.test.ts'),
      "import { test } from 'node:test';\ntest('quick', () => {});\n",
    );
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('refuses a bad option with the usage and exit 2, before running anything', async () => {
    const refused = [
      { args: ['--nodes=2', dir], says: /--nodes must be 1 or 3, not “2”/ },
      { args: ['--concurrency=0', dir], says: /--concurrency .*must be a positive whole number, not “0”/ },
      { args: ['--concurrency=x', dir], says: /--concurrency .*must be a positive whole number, not “x”/ },
      { args: ['--bogus', dir], says: /Unknown option '--bogus'/ },
      { args: [dir, '--concurrency'], says: /Option '--concurrency <value>' argument missing/ },
    ];
    for (const { args, says } of refused) {
      const r = await script('run-tests.mjs', args);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, says, args.join(' '));
      assert.match(r.stderr, /usage: pnpm test:run/, args.join(' '));
      assert.doesNotMatch(r.stdout, /ℹ tests/, args.join(' '));
    }
    const badEnv = await script('run-tests.mjs', [dir], { PARLEY_TEST_CONCURRENCY: 'many' });
    assert.equal(badEnv.code, 2);
    assert.match(badEnv.stderr, /PARLEY_TEST_CONCURRENCY\) must be a positive whole number, not “many”/);
  });

  it('fails a file whose process outlives its tests, naming what is still open', async () => {
    // Its own directory: the other tests run every file of `dir`.
    const lingering = await mkdtemp(join(tmpdir(), 'parley-linger-'));
    try {
      await writeFile(
        join(lingering, 'open.test.ts'),
        "import { createServer } from 'node:net';\nimport { test } from 'node:test';\ntest('leaves a server open', () => new Promise<void>((r) => createServer().listen(0, '127.0.0.1', r)));\n",
      );
      // A process the test starts inherits the runner's NODE_OPTIONS but is not a test file: it is
      // not watched, and prints only its own output.
      await writeFile(join(lingering, 'child.mjs'), "console.log('only this');\n");
      await writeFile(
        join(lingering, 'starts-a-process.test.ts'),
        "import assert from 'node:assert/strict';\nimport { execFileSync } from 'node:child_process';\nimport { join } from 'node:path';\nimport { test } from 'node:test';\ntest('its child prints only its own output', () => assert.equal(execFileSync(process.execPath, [join(import.meta.dirname, 'child.mjs')], { encoding: 'utf8' }), 'only this\\n'));\n",
      );
      const t0 = performance.now();
      const r = await script('run-tests.mjs', [lingering], { PARLEY_TEST_LINGER_MS: '1000' });
      const seconds = (performance.now() - t0) / 1000;
      const out = r.stdout + r.stderr;
      assert.equal(r.code, 1, out);
      assert.match(out, /still running 1 s after its tests ended/);
      assert.match(out, /a server listening on port \d+/);
      assert.match(out, /✔ its child prints only its own output/);
      // Well before the runner's own 300 s limit.
      assert.ok(seconds < 60, `took ${seconds} s`);
    } finally {
      await rm(lingering, { recursive: true, force: true });
    }
  });

  it('ends with the files it ran, the slowest first, and fails when a test fails', async () => {
    const passing = await script('run-tests.mjs', ['--concurrency=2', dir]);
    assert.equal(passing.code, 0, passing.stderr);
    const summary = passing.stdout.slice(passing.stdout.lastIndexOf('\n2 files in'));
    assert.match(summary, /^\n2 files in \d+ s, 2 at a time \(\d+ s of file processes\); the slowest:\n/);
    const listed = [...summary.matchAll(/^ +([\d.]+) s {2}(.+)$/gm)].map((m) => ({
      seconds: Number(m[1]),
      file: m[2] ?? '',
    }));
    assert.deepEqual(
      listed.map((l) => l.file.split('/').at(-1)),
      ['slow.test.ts', 'quick.test.ts'],
    );
    // A file's time is its process's: at least its test's 3 s.
    assert.ok((listed[0]?.seconds ?? 0) >= 3, summary);

    await writeFile(
      join(dir, 'failing.test.ts'),
      "import assert from 'node:assert/strict';\nimport { test } from 'node:test';\ntest('failing', () => assert.equal(1, 2));\n",
    );
    const failing = await script('run-tests.mjs', [dir]);
    assert.equal(failing.code, 1);
    assert.match(failing.stdout, /\n3 files in \d+ s/);
  });
});

describe('pnpm test:contended', () => {
  it('refuses a bad option with the usage and exit 2, and prints the usage for --help', async () => {
    for (const args of [['--runs=0'], ['--runs=x'], ['--bound-ms=-1'], ['--bogus'], ['--runs']]) {
      const r = await script('test-contended.mjs', args);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, /pnpm test:contended \[--runs=<n>\]/, args.join(' '));
      assert.doesNotMatch(r.stderr, /\[contended\] run/, args.join(' '));
    }
    const help = await script('test-contended.mjs', ['--help']);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /--bound-ms=<ms> {2}latest allowed delivery/);
  });
});
