/**
 * The chart's `bridges` block: `helm lint` and `helm template` with helm/parley/ci/bridges-values.yaml.
 * Each bridge renders as one Recreate Deployment with its own creds, mapping and state volume; the
 * mapping in the values is a valid bridge mapping; every variable set is one the bridge reads.
 */
import assert from 'node:assert/strict';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { BridgeEnv, loadMapping } from '@parley/bridge';
import { parse, parseAllDocuments } from 'yaml';
import { helm, helmBinary, root } from './support.js';

// biome-ignore lint/suspicious/noExplicitAny: rendered Kubernetes objects are walked dynamically
type Obj = any;

const chartDir = join(root, 'helm', 'parley');
const valuesFile = join(chartDir, 'ci', 'bridges-values.yaml');
let bin: string;
let dir: string;
let objs: Obj[];
let plain: Obj[];
let values: { bridges: Obj[] };

before(async () => {
  bin = await helmBinary();
  dir = await mkdtemp(join(tmpdir(), 'parley-chart-bridges-'));
  await cp(chartDir, join(dir, 'parley'), { recursive: true });
  // The NATS dependency cannot be fetched here (see helm.test.ts): render without it.
  const chartYaml = join(dir, 'parley', 'Chart.yaml');
  const chart = parse(await readFile(chartYaml, 'utf8')) as Obj;
  delete chart.dependencies;
  await writeFile(chartYaml, JSON.stringify(chart));
  const render = (extra: string[]) =>
    parseAllDocuments(
      helm(bin, ['template', 'parley', join(dir, 'parley'), '--namespace', 'agents', ...extra]),
    )
      .map((d) => d.toJS())
      .filter(Boolean);
  objs = render(['-f', valuesFile]);
  plain = render([]);
  values = parse(await readFile(valuesFile, 'utf8'));
});
after(() => (dir ? rm(dir, { recursive: true, force: true }) : undefined));

const named = (kind: string, name: string) => objs.find((o) => o.kind === kind && o.metadata.name === name);

describe('helm: bridges', () => {
  it('lints with the bridges values and refuses an unknown bridge kind', () => {
    assert.match(helm(bin, ['lint', chartDir, '-f', valuesFile]), /1 chart\(s\) linted, 0 chart\(s\) failed/);
    assert.throws(
      () => helm(bin, ['lint', chartDir, '-f', valuesFile, '--set', 'bridges[0].kind=oracle']),
      /kind/,
    );
  });

  it('renders nothing for bridges by default', () => {
    assert.equal(plain.filter((o) => String(o.metadata?.name).includes('-bridge-')).length, 0);
  });

  it('renders each bridge as one Recreate Deployment with its creds, a valid mapping and a state volume', () => {
    for (const b of values.bridges) {
      const name = `parley-bridge-${b.name}`;
      const dep = named('Deployment', name);
      assert.ok(dep, `${name} Deployment`);
      assert.equal(dep.spec.replicas, 1);
      assert.equal(dep.spec.strategy.type, 'Recreate', 'one writer of the state file');
      const pod = dep.spec.template.spec;
      assert.equal(pod.securityContext.runAsNonRoot, true);
      const c = pod.containers[0];
      assert.deepEqual(c.args, ['bridge']);
      const env = Object.fromEntries(c.env.map((e: Obj) => [e.name, e.value ?? e.valueFrom]));
      assert.equal(env.PARLEY_BRIDGE, b.kind);
      // The bridge reads every variable the chart sets (no typo goes unnoticed).
      const known = new Set(Object.keys(BridgeEnv.shape));
      for (const k of Object.keys(env)) assert.ok(known.has(k), `${name}: ${k} is a bridge setting`);
      for (const [k, ref] of Object.entries(b.secretEnv as Record<string, { secret: string; key: string }>)) {
        assert.deepEqual(env[k], { secretKeyRef: { name: ref.secret, key: ref.key } });
      }
      const mounts = Object.fromEntries(c.volumeMounts.map((m: Obj) => [m.name, m.mountPath]));
      const volumes = Object.fromEntries(pod.volumes.map((v: Obj) => [v.name, v]));
      assert.equal(`${mounts['bridge-creds']}/bridge.creds`, env.NATS_CREDS);
      assert.equal(volumes['bridge-creds'].secret.secretName, b.credsSecret);
      assert.equal(mounts.state, env.PARLEY_BRIDGE_STATE_DIR);
      assert.equal(volumes.state.persistentVolumeClaim.claimName, name);
      assert.equal(named('PersistentVolumeClaim', name).spec.resources.requests.storage, b.persistence.size);
      assert.equal(`${mounts.mapping}/mapping.yaml`, env.PARLEY_BRIDGE_MAPPING);
      const mapping = named('ConfigMap', name).data['mapping.yaml'];
      assert.equal(loadMapping(mapping).bridge, b.name, 'the mapping validates');
      assert.ok(named('Service', name), `${name} Service`);
      const np = named('NetworkPolicy', name);
      const ports = np.spec.egress.flatMap((r: Obj) => (r.ports ?? []).map((p: Obj) => p.port));
      for (const p of b.networkPolicy.sourcePorts)
        assert.ok(ports.includes(p), `${name}: egress to port ${p}`);
      assert.ok(ports.includes(4222), `${name}: egress to NATS`);
    }
  });
});
