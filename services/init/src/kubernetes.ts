/**
 * One Kubernetes Secret as a {@link SecretStore}, through the three REST calls the init Job's Role
 * allows (get, create, update of that Secret). Plain HTTP(S) with the pod's service-account token: no
 * Kubernetes client library for three requests.
 */

import { readFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { checkEntryName, type SecretStore } from './secret-store.js';

/** Where a pod finds its service-account credentials. */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/** Options of {@link createKubernetesSecretStore}. */
export interface KubernetesSecretStoreOptions {
  /** API server base URL, e.g. `https://10.96.0.1:443` (http only in tests). */
  apiUrl: string;
  /** Bearer token (the service account's). */
  token: string;
  /** PEM bundle that signs the API server's certificate. */
  ca?: string;
  namespace: string;
  /** The Secret's name. */
  name: string;
  /** Labels of a Secret this creates. */
  labels?: Record<string, string>;
  /** Per-request timeout. @default 10000 */
  timeoutMs?: number;
}

interface Response {
  status: number;
  body: string;
}

/** The Kubernetes Secret object, as far as this module reads it. */
interface SecretObject {
  metadata?: { resourceVersion?: string };
  data?: Record<string, string>;
}

/** Thrown when the API server answers something this store does not expect (403 above all). */
export class KubernetesApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'KubernetesApiError';
  }
}

/** A SecretStore on one Secret of a Kubernetes API server. */
export function createKubernetesSecretStore(o: KubernetesSecretStoreOptions): SecretStore {
  const base = new URL(o.apiUrl);
  const collection = `/api/v1/namespaces/${encodeURIComponent(o.namespace)}/secrets`;
  const item = `${collection}/${encodeURIComponent(o.name)}`;
  const where = `secret ${o.namespace}/${o.name}`;

  const call = (method: string, path: string, body?: unknown): Promise<Response> =>
    new Promise((resolve, reject) => {
      const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
      const send = base.protocol === 'https:' ? httpsRequest : httpRequest;
      const req = send(
        {
          protocol: base.protocol,
          hostname: base.hostname,
          port: base.port,
          method,
          path,
          ...(o.ca ? { ca: o.ca } : {}),
          headers: {
            authorization: `Bearer ${o.token}`,
            accept: 'application/json',
            ...(payload ? { 'content-type': 'application/json', 'content-length': payload.length } : {}),
          },
          timeout: o.timeoutMs ?? 10_000,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }),
          );
          res.on('error', reject);
        },
      );
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer from the API server`)));
      req.on('error', reject);
      req.end(payload);
    });

  const fail = (what: string, r: Response): never => {
    let reason = r.body.slice(0, 300);
    try {
      reason = (JSON.parse(r.body) as { message?: string }).message ?? reason;
    } catch {}
    const hint =
      r.status === 403 ? ' (the init Job’s Role must allow get, create and update of this Secret)' : '';
    throw new KubernetesApiError(r.status, `${what} ${where}: HTTP ${r.status}: ${reason}${hint}`);
  };

  const encode = (data: Record<string, string>) =>
    Object.fromEntries(
      Object.entries(data).map(([k, v]) => {
        checkEntryName(k);
        return [k, Buffer.from(v, 'utf8').toString('base64')];
      }),
    );

  return {
    where,
    async read() {
      const r = await call('GET', item);
      if (r.status === 404) return undefined;
      if (r.status !== 200) return fail('reading', r);
      const secret = JSON.parse(r.body) as SecretObject;
      const data = Object.fromEntries(
        Object.entries(secret.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]),
      );
      return { data, version: secret.metadata?.resourceVersion ?? '' };
    },
    async create(data) {
      const r = await call('POST', collection, {
        apiVersion: 'v1',
        kind: 'Secret',
        type: 'Opaque',
        metadata: { name: o.name, namespace: o.namespace, ...(o.labels ? { labels: o.labels } : {}) },
        data: encode(data),
      });
      if (r.status === 409) return false;
      if (r.status !== 201 && r.status !== 200) return fail('creating', r);
      return true;
    },
    async update(data, version) {
      // Read-modify-write keeps whatever else is on the object (labels, annotations, type).
      const current = await call('GET', item);
      if (current.status !== 200) return fail('reading', current);
      const secret = JSON.parse(current.body) as SecretObject & Record<string, unknown>;
      if ((secret.metadata?.resourceVersion ?? '') !== version) return false;
      const r = await call('PUT', item, { ...secret, data: encode(data) });
      if (r.status === 409) return false;
      if (r.status !== 200) return fail('updating', r);
      return true;
    },
  };
}

/** Options of {@link inClusterStore}. */
export interface InClusterOptions {
  name: string;
  /** @default the service account's namespace */
  namespace?: string;
  host: string;
  port: number;
  labels?: Record<string, string>;
  /** @default {@link SERVICE_ACCOUNT_DIR} */
  serviceAccountDir?: string;
}

/** The store for a pod: the API server from the kubelet's variables, the pod's service account. */
export async function inClusterStore(o: InClusterOptions): Promise<SecretStore> {
  const dir = o.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;
  const read = (f: string) => readFile(join(dir, f), 'utf8');
  const host = o.host.includes(':') ? `[${o.host}]` : o.host;
  return createKubernetesSecretStore({
    apiUrl: `https://${host}:${o.port}`,
    token: (await read('token')).trim(),
    ca: await read('ca.crt'),
    namespace: o.namespace ?? (await read('namespace')).trim(),
    name: o.name,
    ...(o.labels ? { labels: o.labels } : {}),
  });
}
