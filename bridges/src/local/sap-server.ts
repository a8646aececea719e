/**
 * A local SAP for tests and the enterprise demo: an XSUAA-like OAuth server (client credentials →
 * RS256 JWTs, JWKS at `/token_keys`), an S/4HANA OData v2 endpoint `API_SALES_ORDER_SRV/A_SalesOrder`
 * (bearer token required; `$filter` on SoldToParty and OverallSDProcessStatus), and an Event Mesh
 * push client that delivers S/4HANA business events as CloudEvents to a webhook the way a webhook
 * subscription does: the OPTIONS handshake first, then POSTs with a client-credentials token.
 */
import { randomUUID } from 'node:crypto';
import { CloudEvent, HTTP } from 'cloudevents';
import Fastify from 'fastify';
import { exportJWK, generateKeyPair, jwtVerify, SignJWT } from 'jose';

/** A sales order the OData endpoint serves. */
export interface SalesOrder {
  SalesOrder: string;
  SoldToParty: string;
  TotalNetAmount: string;
  TransactionCurrency: string;
  /** A = open, B = in process, C = completed. */
  OverallSDProcessStatus: 'A' | 'B' | 'C';
}

/** The audience of tokens Event Mesh presents to the bridge's webhook. */
export const WEBHOOK_AUDIENCE = 'parley-sap-bridge';
/** The audience of tokens the bridge presents to the OData API. */
export const ODATA_AUDIENCE = 's4hana-odata';

/** A running local SAP. */
export interface LocalSap {
  baseUrl: string;
  tokenUrl: string;
  jwksUrl: string;
  issuer: string;
  /** Client credentials of the Event Mesh webhook subscription's security schema. */
  eventMeshClient: { clientId: string; clientSecret: string };
  /** Client credentials the bridge uses for OData. */
  odataClient: { clientId: string; clientSecret: string };
  orders: SalesOrder[];
  /** OData requests served (path + query). */
  odataRequests: string[];
  /** A token as Event Mesh would fetch it for the webhook. */
  webhookToken(): Promise<string>;
  /** Delivers events to `url` like an Event Mesh webhook subscription; returns the HTTP status. */
  push(
    url: string,
    events: CloudEvent<unknown>[],
    o?: { token?: string | null; mode?: 'structured' | 'binary' },
  ): Promise<number>;
  /** The CloudEvents webhook handshake against `url`; returns the response. */
  handshake(url: string, origin?: string): Promise<Response>;
  stop(): Promise<void>;
}

/** An S/4HANA business event in SAP's format ("thin": the key fields only). */
export function s4Event(
  type: string,
  data: Record<string, string>,
  o: { id?: string; system?: string; traceparent?: string; sapuser?: string } = {},
): CloudEvent<Record<string, string>> {
  return new CloudEvent({
    specversion: '1.0',
    type,
    source: `/default/sap.s4.beh/${o.system ?? 'S4HCLNT100'}`,
    id: o.id ?? randomUUID(),
    time: new Date().toISOString(),
    datacontenttype: 'application/json',
    data,
    ...(o.traceparent ? { traceparent: o.traceparent } : {}),
    ...(o.sapuser ? { sapuser: o.sapuser } : {}),
  });
}

/** Starts a local SAP on a free port. */
export async function startLocalSap(o: { orders?: SalesOrder[] } = {}): Promise<LocalSap> {
  const { privateKey, publicKey } = await generateKeyPair('RS256');
  const jwk = { ...(await exportJWK(publicKey)), kid: 'local-1', alg: 'RS256', use: 'sig' };
  const eventMeshClient = { clientId: 'sb-eventmesh-webhook', clientSecret: randomUUID() };
  const odataClient = { clientId: 'sb-parley-odata', clientSecret: randomUUID() };
  const audiences = new Map([
    [eventMeshClient.clientId, { secret: eventMeshClient.clientSecret, aud: WEBHOOK_AUDIENCE }],
    [odataClient.clientId, { secret: odataClient.clientSecret, aud: ODATA_AUDIENCE }],
  ]);
  const orders: SalesOrder[] = o.orders ?? [];
  const odataRequests: string[] = [];
  const app = Fastify();
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_r, body, done) =>
    done(null, Object.fromEntries(new URLSearchParams(body as string))),
  );
  let issuer = '';
  const sign = (aud: string, sub: string) =>
    new SignJWT({ client_id: sub, scope: [`${aud}.read`] })
      .setProtectedHeader({ alg: 'RS256', kid: jwk.kid })
      .setIssuer(issuer)
      .setAudience(aud)
      .setSubject(sub)
      .setIssuedAt()
      .setExpirationTime('10m')
      .sign(privateKey);

  app.post('/oauth/token', async (req, reply) => {
    const form = (req.body ?? {}) as Record<string, string>;
    let id = form.client_id;
    let secret = form.client_secret;
    const basic = /^Basic (.+)$/.exec(req.headers.authorization ?? '')?.[1];
    if (basic) {
      const [u, p] = Buffer.from(basic, 'base64').toString('utf8').split(':');
      id = decodeURIComponent(u ?? '');
      secret = decodeURIComponent(p ?? '');
    }
    if (form.grant_type !== 'client_credentials')
      return reply.code(400).send({ error: 'unsupported_grant_type' });
    const client = id ? audiences.get(id) : undefined;
    if (!client || client.secret !== secret) return reply.code(401).send({ error: 'invalid_client' });
    return { access_token: await sign(client.aud, id as string), token_type: 'bearer', expires_in: 600 };
  });
  app.get('/token_keys', async () => ({ keys: [jwk] }));
  app.get('/sap/opu/odata/sap/API_SALES_ORDER_SRV/A_SalesOrder', async (req, reply) => {
    const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
    try {
      await jwtVerify(token ?? '', async () => publicKey, { issuer, audience: ODATA_AUDIENCE });
    } catch {
      return reply
        .code(401)
        .send({ error: { code: '/IWFND/MED/170', message: { lang: 'en', value: 'No service found' } } });
    }
    odataRequests.push(req.url);
    const q = req.query as Record<string, string>;
    const filter = q.$filter ?? '';
    const party = /SoldToParty eq '([^']*)'/.exec(filter)?.[1];
    const notStatus = /OverallSDProcessStatus ne '([^']*)'/.exec(filter)?.[1];
    const results = orders
      .filter(
        (r) =>
          (party === undefined || r.SoldToParty === party) &&
          (notStatus === undefined || r.OverallSDProcessStatus !== notStatus),
      )
      .map((r) => ({
        __metadata: {
          id: `${issuer}/sap/opu/odata/sap/API_SALES_ORDER_SRV/A_SalesOrder('${r.SalesOrder}')`,
          type: 'API_SALES_ORDER_SRV.A_SalesOrderType',
        },
        ...r,
      }));
    return { d: { results } };
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  const baseUrl = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  issuer = `${baseUrl}/oauth/token`;

  const webhookToken = async () => sign(WEBHOOK_AUDIENCE, eventMeshClient.clientId);
  return {
    baseUrl,
    tokenUrl: `${baseUrl}/oauth/token`,
    jwksUrl: `${baseUrl}/token_keys`,
    issuer,
    eventMeshClient,
    odataClient,
    orders,
    odataRequests,
    webhookToken,
    handshake: (url, origin = 'eventmesh.local.sap') =>
      fetch(url, {
        method: 'OPTIONS',
        headers: { 'WebHook-Request-Origin': origin, 'WebHook-Request-Rate': '120' },
      }),
    async push(url, events, opts = {}) {
      const token = opts.token === undefined ? await webhookToken() : opts.token;
      let status = 0;
      for (const ev of events) {
        const msg = opts.mode === 'binary' ? HTTP.binary(ev) : HTTP.structured(ev);
        const res = await fetch(url, {
          method: 'POST',
          headers: {
            ...(msg.headers as Record<string, string>),
            'x-address': `topic:default/sap.s4/S4HCLNT100/ce/${ev.type.replace(/\./g, '/')}`,
            'x-qos': '1',
            ...(token ? { authorization: `Bearer ${token}` } : {}),
          },
          body: msg.body as string,
        });
        await res.arrayBuffer();
        status = res.status;
        if (status >= 300) return status;
      }
      return status;
    },
    stop: () => app.close(),
  };
}
