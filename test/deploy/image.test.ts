/**
 * The container image cannot be built here (no Docker engine), so its Dockerfile is checked for what
 * would break a build or a deployment, and the entrypoint and health check it ships are run for real
 * against a nats-server.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { ensureBackbone, silentLogger } from '@parley/kit';
import { freePort } from '@parley/standalone';
import { startServer, type TestServer, waitFor } from '@parley/test/harness';
import { parse } from 'yaml';
import { deployableServices, root } from './support.js';

interface Instruction {
  op: string;
  args: string;
  line: number;
}

/** Splits a Dockerfile into instructions (continuations joined, comments dropped). */
function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = [];
  let buffer = '';
  let start = 0;
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (!buffer && (line === '' || line.startsWith('#'))) return;
    if (!buffer) start = i + 1;
    buffer += `${line.replace(/\\$/, '')} `;
    if (!line.endsWith('\\')) {
      const m = buffer.trim().match(/^(\S+)\s*(.*)$/s);
      if (m) out.push({ op: (m[1] as string).toUpperCase(), args: m[2] as string, line: start });
      buffer = '';
    }
  });
  return out;
}

const dockerfile = parseDockerfile(readFileSync(join(root, 'deploy', 'Dockerfile'), 'utf8'));
const stages = (() => {
  const list: { name: string; from: string; body: Instruction[] }[] = [];
  for (const ins of dockerfile) {
    if (ins.op === 'FROM') {
      const m = ins.args.match(/^(\S+)(?:\s+AS\s+(\S+))?/i);
      list.push({ name: m?.[2] ?? String(list.length), from: m?.[1] ?? '', body: [] });
    } else list.at(-1)?.body.push(ins);
  }
  return list;
})();
const runtime = stages.at(-1);
const exec = (ins: Instruction) => JSON.parse(ins.args) as string[];
const workspacePackages = (
  parse(readFileSync(join(root, 'pnpm-workspace.yaml'), 'utf8')) as { packages: string[] }
).packages
  .flatMap((p) =>
    p.endsWith('/*') ? readdirSync(join(root, p.slice(0, -2))).map((d) => `${p.slice(0, -2)}/${d}`) : [p],
  )
  .filter((d) => existsSync(join(root, d, 'package.json')));

describe('deploy/Dockerfile', () => {
  it('builds in stages and runs the last one as an unprivileged user', () => {
    assert.deepEqual(
      stages.map((s) => s.name),
      ['build', 'runtime'],
    );
    const users = runtime?.body.filter((i) => i.op === 'USER') ?? [];
    assert.equal(users.length, 1, 'one USER in the runtime stage');
    assert.ok(!['root', '0', '0:0'].includes(users[0]?.args.trim() ?? 'root'), 'USER is not root');
    const userAt = runtime?.body.indexOf(users[0] as Instruction) ?? -1;
    const entryAt = runtime?.body.findIndex((i) => i.op === 'ENTRYPOINT') ?? -1;
    assert.ok(userAt >= 0 && userAt < entryAt, 'USER comes before the ENTRYPOINT');
  });

  it('copies only sources that exist, and every manifest pnpm install needs', () => {
    const copies = dockerfile.filter((i) => i.op === 'COPY' && !/--from=/.test(i.args));
    for (const c of copies) {
      const parts = c.args.split(/\s+/).filter((p) => !p.startsWith('--'));
      for (const src of parts.slice(0, -1)) {
        assert.ok(existsSync(join(root, src)), `line ${c.line}: COPY source ${src} exists`);
      }
    }
    const copied = new Set(copies.flatMap((c) => c.args.split(/\s+/).slice(0, -1)));
    for (const f of ['package.json', 'pnpm-lock.yaml', 'pnpm-workspace.yaml', '.pnpmfile.cjs']) {
      assert.ok(copied.has(f), `${f} is copied before pnpm install`);
    }
    // The install layer sees every workspace package, or --frozen-lockfile refuses the lockfile.
    for (const dir of workspacePackages) {
      assert.ok(copied.has(`${dir}/package.json`), `${dir}/package.json is copied before pnpm install`);
    }
    const build = stages[0]?.body ?? [];
    const install = build.findIndex((i) => i.op === 'RUN' && /pnpm install --frozen-lockfile/.test(i.args));
    const all = build.findIndex((i) => i.op === 'COPY' && /^\.\s+\.$/.test(i.args.trim()));
    assert.ok(install >= 0 && install < all, 'dependencies are installed before the sources are copied');
    const deployRun = build.find(
      (i) => i.op === 'RUN' && /pnpm --filter @parley\/deploy deploy --prod/.test(i.args),
    );
    assert.ok(deployRun, 'production dependencies are pruned with pnpm deploy');
    const fromBuild = runtime?.body.find((i) => i.op === 'COPY' && /--from=build/.test(i.args));
    assert.match(fromBuild?.args ?? '', /\/prod\s+\/app$/, 'the runtime stage takes only the deployed tree');
    const ignore = readFileSync(join(root, '.dockerignore'), 'utf8');
    for (const p of ['**/node_modules', '**/dist', '.git', '.parley']) assert.ok(ignore.includes(p), p);
  });

  it('has an entrypoint under tini, a health check and SIGTERM as stop signal', () => {
    const entry = runtime?.body.find((i) => i.op === 'ENTRYPOINT');
    assert.deepEqual(exec(entry as Instruction), ['/usr/bin/tini', '--', '/app/entrypoint.sh']);
    assert.ok(runtime?.body.some((i) => i.op === 'RUN' && /apt-get install .*\btini\b/.test(i.args)));
    const health = runtime?.body.find((i) => i.op === 'HEALTHCHECK');
    assert.match(health?.args ?? '', /CMD \["node", "\/app\/healthcheck\.mjs"\]/);
    assert.equal(runtime?.body.find((i) => i.op === 'STOPSIGNAL')?.args.trim(), 'SIGTERM');
    const cmd = exec(runtime?.body.find((i) => i.op === 'CMD') as Instruction);
    assert.ok(deployableServices().includes(cmd[0] as string), `CMD ${cmd[0]} is a service`);
  });

  it('ships every deployable service, and the entrypoint names each one’s built main.js', () => {
    const pkg = JSON.parse(readFileSync(join(root, 'deploy', 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
      files: string[];
    };
    const entrypoint = readFileSync(join(root, 'deploy', 'entrypoint.sh'), 'utf8');
    const named = [...entrypoint.matchAll(/^\s*([a-z| ]+)\)\s*$/gm)].flatMap((m) =>
      (m[1] ?? '').split('|').map((s) => s.trim()),
    );
    for (const name of [...deployableServices(), 'init']) {
      assert.ok(pkg.dependencies[`@parley/${name}`], `deploy/package.json depends on @parley/${name}`);
      const svc = JSON.parse(readFileSync(join(root, 'services', name, 'package.json'), 'utf8')) as {
        files: string[];
      };
      assert.ok(svc.files.includes('dist'), `@parley/${name} publishes dist/`);
      const tsconfig = JSON.parse(readFileSync(join(root, 'services', name, 'tsconfig.json'), 'utf8')) as {
        compilerOptions: { rootDir: string; outDir: string };
      };
      assert.deepEqual(
        tsconfig.compilerOptions,
        { rootDir: 'src', outDir: 'dist' },
        `${name}: src/main.ts → dist/main.js`,
      );
      assert.ok(existsSync(join(root, 'services', name, 'src', 'main.ts')));
      if (name !== 'init') assert.ok(named.includes(name), `the entrypoint runs ${name}`);
    }
    assert.match(entrypoint, /exec node "\$app\/node_modules\/@parley\/\$what\/dist\/main\.js"/);
    assert.match(entrypoint, /exec node "\$app\/node_modules\/@parley\/rooms\/dist\/main\.js"/);
    assert.match(entrypoint, /exec node "\$app\/node_modules\/@parley\/init\/dist\/main\.js"/);
    for (const f of ['entrypoint.sh', 'healthcheck.mjs']) {
      assert.ok(pkg.files.includes(f), `${f} is in the deployed tree`);
      assert.ok(existsSync(join(root, 'deploy', f)));
    }
    assert.ok(
      (statSync(join(root, 'deploy', 'entrypoint.sh')).mode & 0o111) !== 0,
      'entrypoint.sh is executable',
    );
  });
});

describe('deploy/entrypoint.sh and healthcheck.mjs (run for real)', () => {
  let server: TestServer | undefined;
  after(() => server?.stop());

  it('starts a service by name, reports healthy, drains and exits 0 on SIGTERM', async () => {
    // The entrypoint runs the built code, as in the image.
    const built = join(root, 'services', 'registry', 'dist', 'main.js');
    assert.ok(existsSync(built), `${built} is missing: run pnpm build (npm test does)`);
    server = await startServer({ operator: true });
    const creds = join(server.dir, 'registry.creds');
    await writeFile(
      creds,
      await (server.operator as NonNullable<TestServer['operator']>).serviceCreds('registry'),
    );
    // The registry needs its bucket.
    const nc = await server.connect();
    await ensureBackbone(nc, {}, silentLogger());
    await nc.close();

    const port = await freePort();
    const env = {
      PATH: process.env.PATH ?? '',
      NATS_URL: server.url,
      NATS_CREDS: creds,
      HTTP_PORT: String(port),
      LOG_LEVEL: 'info',
    };
    const child = spawn(join(root, 'deploy', 'entrypoint.sh'), ['registry'], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c));
    child.stderr.on('data', (c: Buffer) => (output += c));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      const health = () =>
        new Promise<number | null>((resolve) =>
          spawn(process.execPath, [join(root, 'deploy', 'healthcheck.mjs')], {
            env: { HTTP_PORT: String(port) },
          }).once('exit', resolve),
        );
      await waitFor(async () => (await health()) === 0, 'the health check to pass', 20_000);
      child.kill('SIGTERM');
      assert.equal(await exited, 0, output);
      assert.match(output, /"signal":"SIGTERM".*stopping/);
      assert.match(output, /"msg":"stopped"/);
      assert.equal(await health(), 1, 'unhealthy once stopped');
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });

  it('runs rooms with a 32 MB young generation unless NODE_OPTIONS names a size of its own', async () => {
    // The entrypoint as the image lays it out, with a rooms main.js that reports what Node was given.
    const app = await mkdtemp(join(tmpdir(), 'parley-entrypoint-'));
    try {
      await copyFile(join(root, 'deploy', 'entrypoint.sh'), join(app, 'entrypoint.sh'));
      await mkdir(join(app, 'node_modules', '@parley', 'rooms', 'dist'), { recursive: true });
      await writeFile(
        join(app, 'node_modules', '@parley', 'rooms', 'dist', 'main.js'),
        "process.stdout.write(JSON.stringify({ options: process.env.NODE_OPTIONS ?? '', argv: process.argv.slice(2) }));",
      );
      const run = async (nodeOptions?: string) => {
        const child = spawn(join(app, 'entrypoint.sh'), ['rooms', '--flag'], {
          env: { PATH: process.env.PATH ?? '', ...(nodeOptions ? { NODE_OPTIONS: nodeOptions } : {}) },
          stdio: ['ignore', 'pipe', 'inherit'],
        });
        let out = '';
        child.stdout.on('data', (c: Buffer) => (out += c));
        assert.equal(await new Promise((resolve) => child.once('exit', resolve)), 0);
        return JSON.parse(out) as { options: string; argv: string[] };
      };
      assert.deepEqual(await run(), { options: '--max-semi-space-size=32', argv: ['--flag'] });
      assert.equal(
        (await run('--enable-source-maps')).options,
        '--enable-source-maps --max-semi-space-size=32',
      );
      assert.equal((await run('--max-semi-space-size=64')).options, '--max-semi-space-size=64');
    } finally {
      await rm(app, { recursive: true, force: true });
    }
  });

  it('refuses an unknown service with the usage and exit 64', async () => {
    const child = spawn(join(root, 'deploy', 'entrypoint.sh'), ['gatewayy'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (c: Buffer) => (err += c));
    const code = await new Promise((resolve) => child.once('exit', resolve));
    assert.equal(code, 64);
    assert.match(err, /usage: <rooms \| registry \| governance/);
  });
});
