/** A local OIDC issuer (discovery + JWKS over real HTTP, jose keys) and an HTTP client for the gateway. */
import { createServer, type Server } from 'node:http';
import { type CryptoKey, exportJWK, generateKeyPair, type JWK, type JWTPayload, SignJWT } from 'jose';

/** A running identity provider. */
export interface TestIssuer {
  issuer: string;
  /** Signs a token with the current key (or `key`). */
  sign(
    claims: JWTPayload,
    o?: { key?: CryptoKey; kid?: string; expiresIn?: string | number; alg?: string },
  ): Promise<string>;
  /** A new signing key; the old one leaves the JWKS. */
  rotate(): Promise<void>;
  /** How often the JWKS was fetched. */
  readonly jwksFetches: number;
  close(): Promise<void>;
}

/** Starts an OIDC issuer on a free loopback port. */
export async function startIssuer(): Promise<TestIssuer> {
  let current = await newKey();
  let fetches = 0;
  const server: Server = createServer((req, res) => {
    if (req.url === '/.well-known/openid-configuration') {
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          issuer,
          jwks_uri: `${issuer}/jwks`,
          id_token_signing_alg_values_supported: ['RS256'],
        }),
      );
    } else if (req.url === '/jwks') {
      fetches++;
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ keys: [current.jwk] }));
    } else {
      res.statusCode = 404;
      res.end();
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const issuer = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return {
    issuer,
    get jwksFetches() {
      return fetches;
    },
    async sign(claims, o = {}) {
      return new SignJWT(claims)
        .setProtectedHeader({ alg: o.alg ?? 'RS256', kid: o.kid ?? current.kid })
        .setIssuer((claims.iss as string | undefined) ?? issuer)
        .setIssuedAt()
        .setExpirationTime(o.expiresIn ?? '5m')
        .sign(o.key ?? current.privateKey);
    },
    async rotate() {
      current = await newKey();
    },
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        // Keep-alive sockets of the gateway’s JWKS fetches would hold close() open.
        server.closeAllConnections();
      }),
  };
}

let kids = 0;
async function newKey(): Promise<{ kid: string; privateKey: CryptoKey; jwk: JWK }> {
  const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true });
  const kid = `k${++kids}-${Date.now()}`;
  return { kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' } };
}

/** A key pair the issuer never published (forged tokens). */
export async function strangerKey(): Promise<CryptoKey> {
  return (await generateKeyPair('RS256')).privateKey;
}

/** The JSON answer of an HTTP call. */
export interface HttpResult {
  status: number;
  contentType: string;
  body: Record<string, unknown> & { code?: string };
  headers: Headers;
}

/** Calls the gateway with `fetch`. */
export async function http(
  base: string,
  path: string,
  o: { method?: string; token?: string; body?: unknown; headers?: Record<string, string> } = {},
): Promise<HttpResult> {
  const res = await fetch(`${base}${path}`, {
    method: o.method ?? (o.body === undefined ? 'GET' : 'POST'),
    headers: {
      ...(o.body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...(o.token ? { authorization: `Bearer ${o.token}` } : {}),
      ...o.headers,
    },
    ...(o.body !== undefined ? { body: typeof o.body === 'string' ? o.body : JSON.stringify(o.body) } : {}),
  });
  const text = await res.text();
  let body: Record<string, unknown> = {};
  try {
    body = text ? JSON.parse(text) : {};
  } catch {
    body = { text };
  }
  return {
    status: res.status,
    contentType: res.headers.get('content-type') ?? '',
    body,
    headers: res.headers,
  };
}

/** An unsigned token (`alg: none`). */
export function unsignedToken(claims: JWTPayload): string {
  const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  return `${b64({ alg: 'none', typ: 'JWT' })}.${b64(claims)}.`;
}
