/**
 * The SAP bridge. Inbound: SAP Event Mesh / Advanced Event Mesh push CloudEvents (S/4HANA business
 * events such as `sap.s4.beh.salesorder.v1.SalesOrder.Changed.v1`) to the bridge's own webhook:
 *
 * - `OPTIONS` answers the CloudEvents webhook handshake (`WebHook-Request-Origin` →
 *   `WebHook-Allowed-Origin`, `WebHook-Allowed-Rate`), which Event Mesh sends before it delivers;
 * - `POST` needs `Authorization: Bearer <token>`: the token Event Mesh fetched with OAuth client
 *   credentials from the token URL of the subscription's security schema, verified here against
 *   that issuer's JWKS (issuer and audience checked). No or a bad token: 401, counted, nothing stored;
 * - the body is read with the `cloudevents` SDK (structured, binary or batched mode) and validated
 *   (the SDK does not validate on parse); an invalid event: 400, counted, nothing stored;
 * - 2xx only once every event of the request is stored (or ignored, or dead-lettered), so Event
 *   Mesh redelivers anything else; Parley unavailable → 503 with Retry-After.
 *
 * The idempotency key is `source` + `id` (unique per the CloudEvents spec); trace context comes from
 * the CloudEvents distributed-tracing extension (`traceparent`, `tracestate`); the source user, when
 * the producer sends one, from an extension attribute (`sapuser` by default).
 *
 * Outbound: the `sap.salesorders.open` tool reads a customer's open sales orders from the
 * S/4HANA OData API `API_SALES_ORDER_SRV` (OData v2, OAuth client credentials).
 */
import { type CloudEvent, HTTP } from 'cloudevents';
import type { FastifyInstance } from 'fastify';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { type Bridge, RetryLater, type SourceEvent } from '../bridge.js';
import { ClientCredentials } from '../oauth.js';

/** Options of {@link attachSap}. */
export interface AttachSapOptions {
  /** The webhook path. @default /sap/events */
  path?: string;
  /** JWKS of the issuer whose tokens Event Mesh presents. */
  jwksUrl: string;
  issuer: string;
  audience: string;
  /** Origins allowed in the webhook handshake. @default ['*'] */
  allowedOrigins?: string[];
  /** The extension attribute naming the source user. @default sapuser */
  userExtension?: string;
  /** The S/4HANA OData API, for the `sap.salesorders.open` tool. */
  odata?: { baseUrl: string; tokenUrl: string; clientId: string; clientSecret: string };
}

/** Registers the webhook on `app` and the OData tool on `bridge`. */
export function attachSap(bridge: Bridge, app: FastifyInstance, o: AttachSapOptions): void {
  const path = o.path ?? '/sap/events';
  const jwks = createRemoteJWKSet(new URL(o.jwksUrl));
  const allowed = o.allowedOrigins ?? ['*'];
  const userExt = o.userExtension ?? 'sapuser';
  // Event Mesh reuses one token for many pushes: a verified token is trusted until its expiry
  // (what verifying it again would conclude), which saves a signature check per event.
  const verified = new Map<string, number>();
  const verify = async (token: string) => {
    const until = verified.get(token);
    if (until !== undefined && until > Date.now()) return;
    const { payload } = await jwtVerify(token, jwks, { issuer: o.issuer, audience: o.audience });
    if (verified.size >= 1000) verified.delete(verified.keys().next().value as string);
    verified.set(token, Math.min((payload.exp ?? 0) * 1000, Date.now() + 5 * 60_000));
  };

  void app.register(async (scope) => {
    // CloudEvents bodies are JSON under several content types; keep the raw text for the SDK.
    scope.addContentTypeParser('*', { parseAs: 'string', bodyLimit: 1024 * 1024 }, (_req, body, done) =>
      done(null, body),
    );
    scope.options(path, async (req, reply) => {
      const origin = req.headers['webhook-request-origin'];
      if (typeof origin !== 'string')
        return reply.code(400).send({ error: 'WebHook-Request-Origin missing' });
      if (!allowed.includes('*') && !allowed.includes(origin))
        return reply.code(403).send({ error: 'origin not allowed' });
      return reply
        .code(200)
        .header('webhook-allowed-origin', allowed.includes('*') ? '*' : origin)
        .header('webhook-allowed-rate', '*')
        .header('allow', 'POST, OPTIONS')
        .send();
    });
    scope.post(path, async (req, reply) => {
      const auth = req.headers.authorization;
      const bearer = typeof auth === 'string' && /^Bearer\s+(\S+)$/i.exec(auth)?.[1];
      if (!bearer) {
        bridge.refuse('unsigned', { message: 'no bearer token' });
        return reply.code(401).header('www-authenticate', 'Bearer').send({ error: 'unauthenticated' });
      }
      try {
        await verify(bearer);
      } catch (err) {
        bridge.refuse('unauthenticated', { message: `token refused: ${(err as Error).message}` });
        return reply
          .code(401)
          .header('www-authenticate', 'Bearer error="invalid_token"')
          .send({ error: 'invalid token' });
      }
      let events: CloudEvent<unknown>[];
      try {
        const parsed = HTTP.toEvent({
          headers: req.headers as Record<string, string>,
          body: req.body as string,
        });
        // The SDK builds CloudEvent instances without validating them (strict mode is off on parse).
        events = (Array.isArray(parsed) ? parsed : [parsed]) as CloudEvent<unknown>[];
        for (const e of events) e.validate();
      } catch (err) {
        bridge.refuse('malformed', { message: `not a valid CloudEvent: ${(err as Error).message}` });
        return reply.code(400).send({ error: 'malformed', message: (err as Error).message });
      }
      try {
        for (const ce of events) await bridge.ingest(toSourceEvent(ce, userExt));
      } catch (err) {
        if (err instanceof RetryLater)
          return reply.code(503).header('retry-after', '5').send({ error: 'unavailable' });
        throw err;
      }
      return reply.code(200).send({ accepted: events.length });
    });
  });

  if (o.odata) {
    const odata = o.odata;
    const creds = new ClientCredentials(odata);
    bridge.tool('sap.salesorders.open', async (args) => {
      const customer = String(args.customer ?? '');
      if (!/^[A-Za-z0-9]{1,10}$/.test(customer))
        throw new Error('customer must be an SAP business partner number');
      const url = new URL('/sap/opu/odata/sap/API_SALES_ORDER_SRV/A_SalesOrder', odata.baseUrl);
      // %20, not the form encoding's `+`: OData query options are URI components.
      const query = {
        $filter: `SoldToParty eq '${customer}' and OverallSDProcessStatus ne 'C'`,
        $select: 'SalesOrder,SoldToParty,TotalNetAmount,TransactionCurrency,OverallSDProcessStatus',
        $format: 'json',
      };
      url.search = Object.entries(query)
        .map(([k, v]) => `${k}=${encodeURIComponent(v)}`)
        .join('&');
      const res = await fetch(url, {
        headers: { authorization: `Bearer ${await creds.token()}`, accept: 'application/json' },
        signal: AbortSignal.timeout(15_000),
      });
      if (res.status === 401) creds.invalidate();
      if (!res.ok) throw new Error(`OData ${res.status}: ${(await res.text()).slice(0, 200)}`);
      const body = (await res.json()) as { d?: { results?: Record<string, string>[] } };
      const orders = body.d?.results ?? [];
      const total = orders.reduce((sum, r) => sum + Number(r.TotalNetAmount ?? 0), 0);
      return {
        customer,
        count: orders.length,
        totalNetAmount: total.toFixed(2),
        currency: orders[0]?.TransactionCurrency ?? '',
        orders: orders.map((r) => ({
          salesOrder: r.SalesOrder,
          amount: r.TotalNetAmount,
          status: r.OverallSDProcessStatus,
        })),
      };
    });
  }
}

/** A CloudEvent as the kit's source event. */
export function toSourceEvent(ce: CloudEvent<unknown>, userExtension = 'sapuser'): SourceEvent {
  const ext = ce as unknown as Record<string, unknown>;
  const traceparent = typeof ext.traceparent === 'string' ? ext.traceparent : undefined;
  const tracestate = typeof ext.tracestate === 'string' ? ext.tracestate : undefined;
  const valid = traceparent && /^[\da-f]{2}-[\da-f]{32}-[\da-f]{16}-[\da-f]{2}$/.test(traceparent);
  const time = ce.time ? Date.parse(ce.time) : Number.NaN;
  return {
    id: `${ce.source}|${ce.id}`,
    type: ce.type,
    user: typeof ext[userExtension] === 'string' ? (ext[userExtension] as string) : undefined,
    timeMs: Number.isFinite(time) ? time : undefined,
    payload: { source: ce.source, subject: ce.subject, time: ce.time, data: ce.data },
    ...(valid ? { trace: { traceparent, ...(tracestate ? { tracestate } : {}) } } : {}),
  };
}
