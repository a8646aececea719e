/**
 * A Kubernetes API server's Secret endpoints on loopback — GET, POST (create) and PUT (update) of
 * `/api/v1/namespaces/<ns>/secrets[/<name>]` with the real status codes, resourceVersion conflicts and
 * a bearer token — for testing the init Job's store over real HTTP.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

interface StoredObject {
  metadata: { name: string; namespace: string; resourceVersion: string; labels?: Record<string, string> };
  data: Record<string, string>;
  [k: string]: unknown;
}

/** A running fake API server. */
export interface KubeApi {
  url: string;
  token: string;
  /** Stored secrets by `<namespace>/<name>`. */
  secrets: Map<string, StoredObject>;
  /** Every request as `METHOD path`. */
  requests: string[];
  /** Answer 403 to every request of these methods. */
  forbid: Set<string>;
  close(): Promise<void>;
}

async function body(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

/** Starts the fake API server on a free loopback port. */
export async function startKubeApi(token = 'test-token'): Promise<KubeApi> {
  const secrets = new Map<string, StoredObject>();
  const requests: string[] = [];
  const forbid = new Set<string>();
  let version = 100;
  const status = (code: number, reason: string, message: string) => ({
    kind: 'Status',
    apiVersion: 'v1',
    status: 'Failure',
    reason,
    message,
    code,
  });
  const server: Server = createServer(async (req, res) => {
    const send = (code: number, value: unknown) => {
      res.writeHead(code, { 'content-type': 'application/json' });
      res.end(JSON.stringify(value));
    };
    requests.push(`${req.method} ${req.url}`);
    if (req.headers.authorization !== `Bearer ${token}`) return send(401, status(401, 'Unauthorized', 'no'));
    if (forbid.has(req.method ?? '')) {
      return send(403, status(403, 'Forbidden', 'secrets is forbidden: User "system:serviceaccount:x"'));
    }
    const m = req.url?.match(/^\/api\/v1\/namespaces\/([^/]+)\/secrets(?:\/([^/?]+))?$/);
    if (!m) return send(404, status(404, 'NotFound', 'the server could not find the requested resource'));
    const ns = decodeURIComponent(m[1] as string);
    const name = m[2] ? decodeURIComponent(m[2]) : undefined;
    if (req.method === 'GET' && name) {
      const s = secrets.get(`${ns}/${name}`);
      return s ? send(200, s) : send(404, status(404, 'NotFound', `secrets "${name}" not found`));
    }
    if (req.method === 'POST' && !name) {
      const obj = (await body(req)) as StoredObject;
      const key = `${ns}/${obj.metadata.name}`;
      if (secrets.has(key)) {
        return send(409, status(409, 'AlreadyExists', `secrets "${obj.metadata.name}" already exists`));
      }
      const stored = {
        ...obj,
        metadata: { ...obj.metadata, namespace: ns, resourceVersion: String(++version) },
      };
      secrets.set(key, stored);
      return send(201, stored);
    }
    if (req.method === 'PUT' && name) {
      const obj = (await body(req)) as StoredObject;
      const current = secrets.get(`${ns}/${name}`);
      if (!current) return send(404, status(404, 'NotFound', `secrets "${name}" not found`));
      if (obj.metadata.resourceVersion !== current.metadata.resourceVersion) {
        return send(409, status(409, 'Conflict', 'the object has been modified'));
      }
      const stored = { ...obj, metadata: { ...obj.metadata, resourceVersion: String(++version) } };
      secrets.set(`${ns}/${name}`, stored);
      return send(200, stored);
    }
    return send(405, status(405, 'MethodNotAllowed', 'not allowed'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    token,
    secrets,
    requests,
    forbid,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
