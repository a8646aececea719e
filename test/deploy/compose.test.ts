/**
 * deploy/compose.yaml cannot run here (no Docker engine): it is parsed, and every service's environment
 * is checked against that service's own config schema, with the secrets parley-init really writes.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import { describe, it } from 'node:test';
import { entries } from '@parley/init';
import { findNatsServer } from '@parley/standalone';
import { parse } from 'yaml';
import {
  deployableServices,
  isExternallyRead,
  parseEnvFile,
  root,
  secretLayout,
  serviceConfig,
} from './support.js';

interface ComposeService {
  image?: string;
  command?: string[];
  environment?: Record<string, string | number | boolean>;
  volumes?: string[];
  depends_on?: Record<string, { condition: string }> | string[];
  healthcheck?: { test?: string[]; disable?: boolean };
  deploy?: { replicas?: number };
  ports?: string[];
}

const compose = parse(readFileSync(join(root, 'deploy', 'compose.yaml'), 'utf8'), { merge: true }) as {
  services: Record<string, ComposeService>;
  volumes: Record<string, unknown>;
};
const services = compose.services;
const SECRETS = '/parley/secrets';

const envOf = (s: ComposeService) =>
  Object.fromEntries(Object.entries(s.environment ?? {}).map(([k, v]) => [k, String(v)]));
const mountOf = (s: ComposeService, target: string) =>
  (s.volumes ?? []).map((v) => v.split(':')).find((parts) => parts[1] === target)?.[0];
const entryAt = (path: string, dir = SECRETS) => {
  assert.equal(posix.dirname(path), dir, `${path} is in ${dir}`);
  return posix.basename(path);
};
const natsNodes = Object.entries(services).filter(([, s]) => s.image?.startsWith('nats:'));
const natsConf = readFileSync(join(root, 'deploy', 'nats', 'nats.conf'), 'utf8');

/** The environment a container really gets: compose's, plus the env file the entrypoint loads. */
async function effectiveEnv(name: string, s: ComposeService): Promise<Record<string, string>> {
  const env = envOf(s);
  const layout = await secretLayout(deployableServices());
  if (env.PARLEY_ENV_FILE) {
    assert.equal(mountOf(s, SECRETS), 'secrets', `${name} mounts the secrets volume`);
    const file = layout[entryAt(env.PARLEY_ENV_FILE)];
    assert.ok(file, `${env.PARLEY_ENV_FILE} is written by parley-init`);
    Object.assign(env, parseEnvFile(file));
  }
  return env;
}

describe('deploy/compose.yaml', () => {
  it('runs every deployable service in its own container, rooms twice', () => {
    for (const name of deployableServices()) {
      const s = services[name];
      assert.ok(s, `compose has a ${name} service`);
      assert.deepEqual(s.command, [name]);
      // biome-ignore lint/suspicious/noTemplateCurlyInString: compose's own variable syntax
      assert.equal(s.image, '${PARLEY_IMAGE:-parley:dev}');
    }
    assert.equal(services.rooms?.deploy?.replicas, 2);
  });

  for (const name of deployableServices()) {
    it(`${name}: its config schema accepts the environment, and every variable is one it reads`, async () => {
      const s = services[name] as ComposeService;
      const config = await serviceConfig(name);
      const env = await effectiveEnv(name, s);
      for (const v of config.required) assert.ok(env[v], `${name} sets ${v} (required by its config schema)`);
      assert.doesNotThrow(
        () => config.loadConfig(env),
        `${name}'s loadConfig accepts the compose environment`,
      );
      for (const v of Object.keys(env)) {
        assert.ok(config.known.includes(v) || isExternallyRead(v), `${name}: ${v} is read by something`);
      }
      // Every path into the secrets volume names a file parley-init writes.
      const layout = await secretLayout(deployableServices());
      for (const [v, value] of Object.entries(env)) {
        if (value.startsWith(`${SECRETS}/`))
          assert.ok(layout[entryAt(value)], `${name}: ${v}=${value} exists`);
      }
      // Its creds are the ones parley-init mints for it, from the mounted volume.
      assert.equal(mountOf(s, SECRETS), 'secrets');
      assert.equal(entryAt(env.NATS_CREDS as string), entries.serviceCreds(name));
      assert.ok((await secretLayout(deployableServices()))[entries.serviceCreds(name)]);
      // It reaches every NATS node.
      assert.deepEqual(env.NATS_URL?.split(',').sort(), natsNodes.map(([n]) => `nats://${n}:4222`).sort());
      assert.equal(env.PARLEY_REPLICAS, '3', 'R3 streams on the 3-node cluster');
      // Health: the image's check, on the port the service listens on.
      assert.deepEqual(s.healthcheck?.test, ['CMD', 'node', '/app/healthcheck.mjs']);
      assert.ok(!s.healthcheck?.disable);
      const deps = s.depends_on as Record<string, { condition: string }>;
      assert.equal(deps['init-backbone']?.condition, 'service_completed_successfully');
      // Traces go to Jaeger over OTLP/HTTP.
      assert.equal(env.OTEL_EXPORTER_OTLP_ENDPOINT, 'http://jaeger:4318');
    });
  }

  it('init-keys writes creds for every service into the shared volume before NATS starts', async () => {
    const init = await serviceConfig('init');
    const s = services['init-keys'] as ComposeService;
    assert.deepEqual(s.command, ['init', 'keys']);
    const env = envOf(s);
    const config = init.loadConfig(env) as {
      PARLEY_SECRET_STORE: string;
      PARLEY_SECRETS_DIR: string;
      PARLEY_SERVICES: string;
    };
    assert.equal(config.PARLEY_SECRET_STORE, 'dir');
    assert.equal(config.PARLEY_SECRETS_DIR, SECRETS);
    assert.equal(mountOf(s, SECRETS), 'secrets');
    const minted = config.PARLEY_SERVICES.split(',');
    for (const name of [...deployableServices(), 'init'])
      assert.ok(minted.includes(name), `creds for ${name}`);
    for (const [n, node] of natsNodes) {
      const deps = node.depends_on as Record<string, { condition: string }>;
      assert.equal(deps['init-keys']?.condition, 'service_completed_successfully', `${n} waits for the keys`);
    }
  });

  it('init-backbone creates R3 streams with R1 inbox consumers once every NATS node is healthy', async () => {
    const init = await serviceConfig('init');
    const s = services['init-backbone'] as ComposeService;
    assert.deepEqual(s.command, ['init', 'backbone']);
    const env = envOf(s);
    for (const v of Object.keys(env)) assert.ok(init.known.includes(v), `init reads ${v}`);
    const config = init.loadConfig(env) as Record<string, unknown>;
    assert.equal(config.PARLEY_REPLICAS, 3);
    assert.equal(config.PARLEY_INBOX_CONSUMER_REPLICAS, 1);
    const layout = await secretLayout(deployableServices());
    assert.ok(layout[entryAt(env.NATS_CREDS as string)], 'its creds are minted by init-keys');
    assert.ok(layout[entryAt(env.PARLEY_STATE_FILE as string)], 'the state it seeds is written by init-keys');
    const deps = s.depends_on as Record<string, { condition: string }>;
    for (const [n] of natsNodes) assert.equal(deps[n]?.condition, 'service_healthy');
  });

  it('runs a 3-node NATS cluster (2.12.3 or newer) whose routes name every node', () => {
    assert.equal(natsNodes.length, 3);
    const clusterPort = natsConf.match(/cluster\s*\{[^}]*listen:\s*[\d.]+:(\d+)/s)?.[1];
    const routes = [...natsConf.matchAll(/nats-route:\/\/([\w-]+):(\d+)/g)].map((m) => [m[1], m[2]]);
    assert.deepEqual(
      routes.map(([host]) => host).sort(),
      natsNodes.map(([n]) => n).sort(),
      'routes name every node',
    );
    for (const [, port] of routes) assert.equal(port, clusterPort, 'routes use the cluster port');
    const names = new Set<string>();
    for (const [n, node] of natsNodes) {
      const [major, minor, patch] = (node.image?.split(':')[1] ?? '').split(/[.-]/).map(Number);
      assert.ok(
        (major as number) > 2 ||
          ((major as number) === 2 && ((minor as number) > 12 || (minor === 12 && (patch as number) >= 3))),
        `${n} runs nats-server ${node.image} (2.12.3+: the Jepsen fixes)`,
      );
      const env = envOf(node);
      assert.ok(env.SERVER_NAME && !names.has(env.SERVER_NAME), `${n} has its own server name`);
      names.add(env.SERVER_NAME as string);
      assert.equal(mountOf(node, '/etc/nats/nats.conf'), './nats/nats.conf');
      assert.equal(mountOf(node, '/etc/nats/secrets'), 'secrets');
      assert.ok(node.healthcheck?.test?.join(' ').includes('/healthz?js-enabled-only=true'));
      assert.ok(mountOf(node, '/data')?.startsWith('nats-'), `${n} keeps its data in a volume`);
    }
    assert.match(natsConf, /include "secrets\/nats-auth\.conf"/);
    assert.match(natsConf, /sync_interval: always/);
    assert.match(natsConf, /resolver\s*\{[^}]*type: full/s);
  });

  it('has a nats-server configuration that nats-server accepts with the generated operator include', async () => {
    const bin = await findNatsServer();
    assert.ok(bin, 'nats-server is needed');
    const dir = await mkdtemp(join(tmpdir(), 'parley-compose-'));
    try {
      const layout = await secretLayout(deployableServices());
      await mkdir(join(dir, 'secrets'));
      await writeFile(join(dir, 'secrets', entries.natsAuth), layout[entries.natsAuth] as string);
      // The local server is 2.9, which predates sync_interval (2.10); the compose image is 2.12.
      const conf = natsConf
        .replace(/^\s*sync_interval: always\s*$/m, '')
        .replaceAll('/data/', `${dir}/data/`);
      await writeFile(join(dir, 'nats.conf'), conf);
      const r = spawnSync(bin, ['-t', '-c', join(dir, 'nats.conf')], {
        env: { SERVER_NAME: 'nats-1' },
        encoding: 'utf8',
      });
      assert.equal(r.status, 0, r.stderr + r.stdout);
      assert.match(r.stderr + r.stdout, /is valid/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('sends traces to Jaeger and lets Prometheus scrape every service', () => {
    assert.match(services.jaeger?.image ?? '', /^jaegertracing\/jaeger:2\./);
    assert.ok(services.jaeger?.ports?.includes('16686:16686'), 'the Jaeger UI is published');
    const prom = services.prometheus as ComposeService;
    assert.equal(mountOf(prom, '/etc/prometheus/prometheus.yml'), './prometheus/prometheus.yml');
    const config = parse(readFileSync(join(root, 'deploy', 'prometheus', 'prometheus.yml'), 'utf8')) as {
      scrape_configs: {
        job_name: string;
        metrics_path: string;
        dns_sd_configs: { names: string[]; port: number }[];
      }[];
    };
    const job = config.scrape_configs.find((j) => j.job_name === 'parley');
    assert.equal(job?.metrics_path, '/metrics');
    assert.deepEqual(job?.dns_sd_configs[0]?.names.slice().sort(), deployableServices());
    for (const name of deployableServices()) {
      assert.equal(String(job?.dns_sd_configs[0]?.port), envOf(services[name] as ComposeService).HTTP_PORT);
    }
  });
});
