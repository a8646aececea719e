/**
 * House rules the compiler does not check (STYLE.md): every subject comes from
 * contracts/src/subjects.ts, services never import each other, no package reaches into another's
 * `src/`, and docs/architecture.md cites only files that exist.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

function sources(dir: string): string[] {
  const abs = join(ROOT, dir);
  if (!existsSync(abs)) return [];
  const out: string[] = [];
  for (const name of readdirSync(abs)) {
    if (name === 'node_modules' || name === 'dist') continue;
    const p = join(abs, name);
    if (statSync(p).isDirectory()) out.push(...sources(relative(ROOT, p)));
    else if (/\.(ts|tsx|mts)$/.test(name) && !name.endsWith('.d.ts')) out.push(relative(ROOT, p));
  }
  return out;
}

/** The code of a source file without its comments (strings are kept). */
function code(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`\\])\/\/[^\n]*/g, '$1');
}

const packages = readdirSync(join(ROOT, 'services')).filter((n) =>
  existsSync(join(ROOT, 'services', n, 'package.json')),
);
const packageName = (dir: string) =>
  (JSON.parse(readFileSync(join(ROOT, dir, 'package.json'), 'utf8')) as { name: string }).name;

/**
 * Packages under services/ that are libraries, not services: any package may use them.
 * `standalone` is the one-process distribution: it starts every service, so it is the one package
 * (with the top-level tests and benchmark, which start services to test them) that imports them.
 */
const LIBRARIES = new Set(['kit', 'keys', 'nats-server']);
const MAY_IMPORT_SERVICES = new Set(['standalone']);

/** `parley.`-strings that are not subjects: a CloudEvents type and a metadata key. */
const NOT_SUBJECTS = new Set(['parley.delivery', 'parley.ask']);

/** `parley.` string literals (quoted or template) in `text` that are not in {@link NOT_SUBJECTS}. */
export function subjectLiterals(text: string): string[] {
  const found = [...code(text).matchAll(/['"`](parley\.[^'"`\s]*)/g)].map((m) => m[1] as string);
  return found.filter((s) => !NOT_SUBJECTS.has(s.replace(/[\\'"`]+$/, '')));
}

describe('house rules', () => {
  it('finds a subject literal when there is one (the check below can fail)', () => {
    assert.deepEqual(subjectLiterals("nc.subscribe('parley.evt.registry.>');"), ['parley.evt.registry.>']);
    assert.deepEqual(subjectLiterals('js.publish(`parley.room.7.r1`)'), ['parley.room.7.r1']);
    assert.deepEqual(subjectLiterals("// on 'parley.in.x.send'\n/** `parley.evt.*` */ x('parley.ask')"), []);
  });

  it('no `parley.` subject literals in services, the SDK or bridges: subjects come from contracts/src/subjects.ts', () => {
    const dirs = [...packages.map((p) => `services/${p}/src`), 'sdk/src', 'bridges/src'];
    const offenders = dirs
      .flatMap(sources)
      .flatMap((f) => subjectLiterals(readFileSync(join(ROOT, f), 'utf8')).map((s) => `${f}: ${s}`));
    assert.deepEqual(offenders, []);
  });

  it('services never import other services; no package imports another one’s src/', () => {
    const services = new Map(
      packages.filter((p) => !LIBRARIES.has(p)).map((p) => [packageName(`services/${p}`), p]),
    );
    const offenders: string[] = [];
    const scan = (files: string[], self: string | undefined, mayImportServices: boolean) => {
      for (const f of files) {
        for (const m of code(readFileSync(join(ROOT, f), 'utf8')).matchAll(
          /(?:from|import)\s*\(?\s*['"](@parley\/[^'"]+)['"]/g,
        )) {
          const spec = m[1] as string;
          const [scope, name, ...rest] = spec.split('/');
          const pkg = `${scope}/${name}`;
          if (rest[0] === 'src' || rest[0] === 'dist') offenders.push(`${f}: deep import ${spec}`);
          if (!mayImportServices && services.has(pkg) && services.get(pkg) !== self)
            offenders.push(`${f}: imports the service ${pkg}`);
        }
      }
    };
    for (const p of packages) {
      const files = [...sources(`services/${p}/src`), ...sources(`services/${p}/test`)];
      scan(files, p, MAY_IMPORT_SERVICES.has(p));
    }
    for (const dir of ['sdk', 'contracts', 'bridges/src', 'bridges/test', 'console/src', 'clients'])
      scan(sources(dir), undefined, false);
    // The cross-service tests, the benchmark and the enterprise demo start services on purpose;
    // only deep imports count there.
    for (const dir of ['test', 'bridges/demo']) scan(sources(dir), undefined, true);
    assert.deepEqual(offenders, []);
  });

  it('docs/architecture.md cites only files that are in the repository', () => {
    const doc = readFileSync(join(ROOT, 'docs/architecture.md'), 'utf8');
    const tops = new Set(
      readdirSync(ROOT).filter((n) => !n.startsWith('.') && statSync(join(ROOT, n)).isDirectory()),
    );
    const cited = [...doc.matchAll(/`([A-Za-z0-9_.-]+\/[A-Za-z0-9_./-]+\.[a-z]{2,5})`/g)].map(
      (m) => m[1] as string,
    );
    const checked = cited.filter(
      (p) => tops.has(p.split('/')[0] as string) || packages.includes(p.split('/')[0] as string),
    );
    assert.ok(checked.length > 10, `${checked.length} cited paths`);
    const missing = checked.filter(
      (p) => !existsSync(join(ROOT, p)) && !existsSync(join(ROOT, 'services', p)),
    );
    assert.deepEqual(missing, []);
  });
});
