/**
 * A local Salesforce for tests and the enterprise demo: a gRPC server implementing the Pub/Sub API
 * proto (Subscribe with replay presets, replay ids and `num_requested` flow control; ManagedSubscribe
 * with server-side commits of replay ids; GetSchema; GetTopic; Publish), serving Change Data Capture events in Salesforce's format (ChangeEventHeader,
 * bitmap-encoded field lists, Avro binary payloads) and Platform Events, plus the OAuth 2.0
 * client-credentials token endpoint. Every RPC checks the `accesstoken`, `instanceurl` and
 * `tenantid` metadata.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { type AvroType, encodeFieldBitmap, parseSchema } from '../salesforce/avro.js';
import {
  type ConsumerEvent,
  eventbus,
  type FetchRequest,
  type FetchResponse,
  type ManagedFetchRequest,
  type ManagedFetchResponse,
  type ProducerEvent,
  type PublishRequest,
} from '../salesforce/proto.js';

/** Avro schema of AccountChangeEvent, shaped like Salesforce's (header first, then the fields). */
export const ACCOUNT_CHANGE_SCHEMA = {
  type: 'record',
  name: 'AccountChangeEvent',
  namespace: 'com.sforce.eventbus',
  fields: [
    {
      name: 'ChangeEventHeader',
      type: {
        type: 'record',
        name: 'ChangeEventHeader',
        fields: [
          { name: 'entityName', type: 'string' },
          { name: 'recordIds', type: { type: 'array', items: 'string' } },
          {
            name: 'changeType',
            type: {
              type: 'enum',
              name: 'ChangeType',
              symbols: [
                'CREATE',
                'UPDATE',
                'DELETE',
                'UNDELETE',
                'GAP_CREATE',
                'GAP_UPDATE',
                'GAP_DELETE',
                'GAP_UNDELETE',
                'GAP_OVERFLOW',
              ],
            },
          },
          { name: 'changeOrigin', type: 'string' },
          { name: 'transactionKey', type: 'string' },
          { name: 'sequenceNumber', type: 'int' },
          { name: 'commitTimestamp', type: 'long' },
          { name: 'commitNumber', type: 'long' },
          { name: 'commitUser', type: 'string' },
          { name: 'nulledFields', type: { type: 'array', items: 'string' } },
          { name: 'diffFields', type: { type: 'array', items: 'string' } },
          { name: 'changedFields', type: { type: 'array', items: 'string' } },
        ],
      },
    },
    { name: 'Name', type: ['null', 'string'], default: null },
    { name: 'AccountNumber', type: ['null', 'string'], default: null },
    { name: 'Industry', type: ['null', 'string'], default: null },
    { name: 'AnnualRevenue', type: ['null', 'double'], default: null },
    { name: 'Rating', type: ['null', 'string'], default: null },
    {
      name: 'BillingAddress',
      type: [
        'null',
        {
          type: 'record',
          name: 'Address',
          fields: [
            { name: 'Street', type: ['null', 'string'], default: null },
            { name: 'City', type: ['null', 'string'], default: null },
            { name: 'PostalCode', type: ['null', 'string'], default: null },
            { name: 'Country', type: ['null', 'string'], default: null },
          ],
        },
      ],
      default: null,
    },
    { name: 'LastModifiedDate', type: ['null', 'long'], default: null },
  ],
};

/** Avro schema of a Platform Event `Credit_Hold__e`. */
export const CREDIT_HOLD_SCHEMA = {
  type: 'record',
  name: 'Credit_Hold__e',
  namespace: 'com.sforce.eventbus',
  fields: [
    { name: 'CreatedDate', type: 'long' },
    { name: 'CreatedById', type: 'string' },
    { name: 'Account_Id__c', type: ['null', 'string'], default: null },
    { name: 'Reason__c', type: ['null', 'string'], default: null },
  ],
};

interface Topic {
  name: string;
  schemaId: string;
  type: AvroType;
  log: ConsumerEvent[];
  canPublish: boolean;
}

interface Subscriber {
  topic: Topic;
  next: number;
  credit: number;
  call:
    | grpc.ServerDuplexStream<FetchRequest, FetchResponse>
    | grpc.ServerDuplexStream<ManagedFetchRequest, ManagedFetchResponse>;
}

/** A ManagedEventSubscription record: its topic, where it starts, and the position it committed. */
interface Managed {
  id: string;
  developerName: string;
  topic: Topic;
  replayPreset: 'LATEST' | 'EARLIEST';
  committed?: Buffer;
}

/** A change to emit on a CDC topic. */
export interface ChangeInput {
  recordIds: string[];
  changeType?: 'CREATE' | 'UPDATE' | 'DELETE' | 'UNDELETE';
  /** Field values after the change (unchanged fields are null, as in the Pub/Sub API). */
  fields: Record<string, unknown>;
  changedFields?: string[];
  commitUser?: string;
  commitTimestamp?: number;
  traceparent?: string;
}

/** A running local Salesforce. */
export interface LocalSalesforce {
  /** `127.0.0.1:<port>` of the gRPC server. */
  endpoint: string;
  /** Base URL of the token endpoint (`/services/oauth2/token`). */
  loginUrl: string;
  clientId: string;
  clientSecret: string;
  orgId: string;
  /** Every FetchRequest received, in order (flow control and replay presets show here). */
  fetchRequests: FetchRequest[];
  /** Every ManagedFetchRequest received, in order (subscription, flow control, commits). */
  managedRequests: ManagedFetchRequest[];
  /** Creates a managed subscription (a ManagedEventSubscription record) on `topic`; returns its id. */
  createManagedSubscription(
    developerName: string,
    topic: string,
    o?: { replayPreset?: 'LATEST' | 'EARLIEST' },
  ): string;
  /** The replay id (base64) the managed subscription committed last. */
  committedReplayId(developerName: string): string | undefined;
  /** Refuses the next commit with error code COMMIT (as an unrecoverable commit error). */
  refuseNextCommit(msg: string): void;
  /** How many times an event (by its event id) was sent to a subscriber, over all streams. */
  deliveries(eventId: string): number;
  /** Tokens issued so far. */
  tokensIssued(): number;
  /** Makes every issued token invalid (as an expiry would). */
  revokeTokens(): void;
  /** Emits a change event on `/data/<entity>ChangeEvent`; returns its event id and replay id. */
  emitChange(entity: 'Account', change: ChangeInput): { id: string; replayId: string };
  /** Emits a Platform Event (its topic must exist). */
  emitPlatformEvent(
    topic: string,
    fields: Record<string, unknown>,
    o?: { traceparent?: string },
  ): { id: string };
  /** Emits bytes that are not Avro of the topic's schema. */
  emitMalformed(topic: string): { id: string };
  /** Events published on `topic` by clients, decoded. */
  published(topic: string): Record<string, unknown>[];
  /** Stops the gRPC server (an outage); {@link LocalSalesforce.resume} starts it on the same port. */
  outage(): Promise<void>;
  resume(): Promise<void>;
  stop(): Promise<void>;
}

/** Starts a local Salesforce on free ports. */
export async function startLocalSalesforce(): Promise<LocalSalesforce> {
  const orgId = `00D${randomBytes(6).toString('hex').toUpperCase().slice(0, 12)}`;
  const clientId = `3MVG9${randomBytes(8).toString('hex')}`;
  const clientSecret = randomBytes(16).toString('hex');
  const tokens = new Set<string>();
  let issued = 0;
  let replaySeq = 1_000_000n;
  const topics = new Map<string, Topic>();
  const subscribers = new Set<Subscriber>();
  const fetchRequests: FetchRequest[] = [];
  const managedRequests: ManagedFetchRequest[] = [];
  const managed = new Map<string, Managed>();
  const delivered = new Map<string, number>();
  let refuseCommit: string | undefined;
  const published = new Map<string, Record<string, unknown>[]>();
  let tx = 0;

  const addTopic = (name: string, schema: object, canPublish: boolean) => {
    const schemaId = randomBytes(11).toString('base64url');
    topics.set(name, { name, schemaId, type: parseSchema(JSON.stringify(schema)), log: [], canPublish });
  };
  addTopic('/data/AccountChangeEvent', ACCOUNT_CHANGE_SCHEMA, false);
  addTopic('/event/Credit_Hold__e', CREDIT_HOLD_SCHEMA, true);
  addTopic('/event/Unmapped__e', CREDIT_HOLD_SCHEMA, true);

  // The token endpoint.
  const http: HttpServer = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => {
      body += c;
    });
    req.on('end', () => {
      const form = new URLSearchParams(body);
      const send = (code: number, json: unknown) => {
        res.writeHead(code, { 'content-type': 'application/json' });
        res.end(JSON.stringify(json));
      };
      if (req.method !== 'POST' || req.url !== '/services/oauth2/token')
        return send(404, { error: 'not_found' });
      if (form.get('grant_type') !== 'client_credentials')
        return send(400, { error: 'unsupported_grant_type' });
      if (form.get('client_id') !== clientId || form.get('client_secret') !== clientSecret) {
        return send(400, { error: 'invalid_client', error_description: 'invalid client credentials' });
      }
      const token = `${orgId}!${randomBytes(24).toString('base64url')}`;
      tokens.add(token);
      issued++;
      send(200, {
        access_token: token,
        instance_url: loginUrl,
        id: `${loginUrl}/id/${orgId}/005000000000001AAA`,
        token_type: 'Bearer',
        issued_at: String(Date.now()),
      });
    });
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  const loginUrl = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;

  const authError = (md: grpc.Metadata): grpc.ServiceError | undefined => {
    const token = md.get('accesstoken')[0];
    if (
      typeof token !== 'string' ||
      !tokens.has(token) ||
      md.get('tenantid')[0] !== orgId ||
      !md.get('instanceurl')[0]
    ) {
      const e = new Error('authentication failed') as grpc.ServiceError;
      e.code = grpc.status.UNAUTHENTICATED;
      e.details = 'authentication failed: invalid or expired accesstoken';
      return e;
    }
    return undefined;
  };
  const failure = (code: grpc.status, details: string) =>
    Object.assign(new Error(details), { code, details });

  const pump = (s: Subscriber) => {
    while (s.credit > 0 && s.next < s.topic.log.length) {
      const n = Math.min(s.credit, 50, s.topic.log.length - s.next);
      const events = s.topic.log.slice(s.next, s.next + n);
      s.next += n;
      s.credit -= n;
      for (const e of events) delivered.set(e.event.id, (delivered.get(e.event.id) ?? 0) + 1);
      s.call.write({
        events,
        latest_replay_id: (events[events.length - 1] as ConsumerEvent).replay_id,
        rpc_id: randomUUID(),
        pending_num_requested: s.credit,
      });
    }
  };

  const append = (topic: Topic, ev: ProducerEvent): ConsumerEvent => {
    const replay = Buffer.alloc(8);
    replay.writeBigUInt64BE(replaySeq++);
    const ce = { event: ev, replay_id: replay };
    topic.log.push(ce);
    for (const s of subscribers) if (s.topic === topic) pump(s);
    return ce;
  };

  // A stream's subscriber stops getting events once the client ends, errs or cancels.
  const untilClosed = (
    call: grpc.ServerDuplexStream<unknown, unknown>,
    sub: () => Subscriber | undefined,
  ) => {
    const end = () => {
      const s = sub();
      if (s) subscribers.delete(s);
    };
    call.on('end', () => {
      end();
      call.end();
    });
    call.on('error', end);
    call.on('cancelled', end);
  };

  const service: grpc.UntypedServiceImplementation = {
    Subscribe(call: grpc.ServerDuplexStream<FetchRequest, FetchResponse>) {
      const err = authError(call.metadata);
      if (err) return call.destroy(err);
      let sub: Subscriber | undefined;
      call.on('data', (req: FetchRequest) => {
        fetchRequests.push(req);
        if (!sub) {
          const topic = topics.get(req.topic_name);
          if (!topic)
            return call.destroy(failure(grpc.status.NOT_FOUND, `topic ${req.topic_name} not found`));
          let next = topic.log.length;
          if (req.replay_preset === 'EARLIEST') next = 0;
          if (req.replay_preset === 'CUSTOM') {
            const at = topic.log.findIndex((e) => req.replay_id && e.replay_id.equals(req.replay_id));
            if (at < 0)
              return call.destroy(
                failure(grpc.status.INVALID_ARGUMENT, 'replay id not valid for this topic'),
              );
            next = at + 1;
          }
          sub = { topic, next, credit: 0, call };
          subscribers.add(sub);
        } else if (req.topic_name && req.topic_name !== sub.topic.name) {
          return call.destroy(
            failure(grpc.status.INVALID_ARGUMENT, 'topic_name differs from the first request'),
          );
        }
        sub.credit += Math.max(0, req.num_requested);
        pump(sub);
      });
      untilClosed(call, () => sub);
    },
    ManagedSubscribe(call: grpc.ServerDuplexStream<ManagedFetchRequest, ManagedFetchResponse>) {
      const err = authError(call.metadata);
      if (err) return call.destroy(err);
      let sub: (Subscriber & { managed: Managed }) | undefined;
      call.on('data', (req: ManagedFetchRequest) => {
        managedRequests.push(req);
        const named = req.subscription_id || req.developer_name;
        if (!sub) {
          if (!named)
            return call.destroy(
              failure(
                grpc.status.INVALID_ARGUMENT,
                'the first request names no subscription_id or developer_name',
              ),
            );
          const m = [...managed.values()].find((x) => x.id === named || x.developerName === named);
          if (!m)
            return call.destroy(failure(grpc.status.NOT_FOUND, `managed subscription ${named} not found`));
          // After the committed position; without one, where the record says.
          const at = m.committed
            ? m.topic.log.findIndex((e) => e.replay_id.equals(m.committed as Buffer))
            : -1;
          const next = at >= 0 ? at + 1 : m.replayPreset === 'EARLIEST' ? 0 : m.topic.log.length;
          sub = { topic: m.topic, next, credit: 0, call, managed: m };
          subscribers.add(sub);
        } else if (named && named !== sub.managed.id && named !== sub.managed.developerName) {
          return call.destroy(
            failure(grpc.status.INVALID_ARGUMENT, 'the subscription differs from the first request'),
          );
        }
        const c = req.commit_replay_id_request;
        if (c) {
          const m = sub.managed;
          const known = m.topic.log.some((e) => e.replay_id.equals(c.replay_id));
          const refused = refuseCommit ?? (known ? undefined : 'replay id not valid for this subscription');
          refuseCommit = undefined;
          if (!refused) m.committed = Buffer.from(c.replay_id);
          const last =
            sub.next > 0 ? (m.topic.log[sub.next - 1] as ConsumerEvent).replay_id : Buffer.alloc(0);
          call.write({
            events: [],
            latest_replay_id: last,
            rpc_id: randomUUID(),
            pending_num_requested: sub.credit,
            commit_response: {
              commit_request_id: c.commit_request_id,
              replay_id: c.replay_id,
              ...(refused ? { error: { code: 'COMMIT', msg: refused } } : {}),
              process_time: String(Date.now()),
            },
          });
        }
        sub.credit += Math.max(0, req.num_requested ?? 0);
        pump(sub);
      });
      untilClosed(call, () => sub);
    },
    GetSchema(call: grpc.ServerUnaryCall<{ schema_id: string }, unknown>, cb: grpc.sendUnaryData<unknown>) {
      const err = authError(call.metadata);
      if (err) return cb(err);
      const t = [...topics.values()].find((x) => x.schemaId === call.request.schema_id);
      if (!t) return cb(failure(grpc.status.NOT_FOUND, 'schema not found'));
      cb(null, { schema_json: JSON.stringify(t.type.schema()), schema_id: t.schemaId, rpc_id: randomUUID() });
    },
    GetTopic(call: grpc.ServerUnaryCall<{ topic_name: string }, unknown>, cb: grpc.sendUnaryData<unknown>) {
      const err = authError(call.metadata);
      if (err) return cb(err);
      const t = topics.get(call.request.topic_name);
      if (!t) return cb(failure(grpc.status.NOT_FOUND, 'topic not found'));
      cb(null, {
        topic_name: t.name,
        tenant_guid: orgId,
        can_publish: t.canPublish,
        can_subscribe: true,
        schema_id: t.schemaId,
        rpc_id: randomUUID(),
      });
    },
    Publish(call: grpc.ServerUnaryCall<PublishRequest, unknown>, cb: grpc.sendUnaryData<unknown>) {
      const err = authError(call.metadata);
      if (err) return cb(err);
      const t = topics.get(call.request.topic_name);
      if (!t?.canPublish) return cb(failure(grpc.status.PERMISSION_DENIED, 'cannot publish on this topic'));
      const results = call.request.events.map((ev) => {
        // Like Salesforce, the payload is not validated at publish; we decode it to show the test.
        const ce = append(t, ev);
        try {
          const list = published.get(t.name) ?? [];
          list.push(t.type.fromBuffer(ev.payload) as Record<string, unknown>);
          published.set(t.name, list);
        } catch {}
        return { replay_id: ce.replay_id, correlation_key: ev.id };
      });
      cb(null, { results, schema_id: t.schemaId, rpc_id: randomUUID() });
    },
    PublishStream(call: grpc.ServerDuplexStream<unknown, unknown>) {
      call.destroy(
        failure(grpc.status.UNIMPLEMENTED, 'PublishStream is not implemented by the local server'),
      );
    },
  };

  let server: grpc.Server | undefined;
  let port = 0;
  const listen = async () => {
    server = new grpc.Server();
    server.addService(eventbus().PubSub.service, service);
    port = await new Promise<number>((resolve, reject) =>
      server?.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (e, p) =>
        e ? reject(e) : resolve(p),
      ),
    );
  };
  await listen();

  const headersOf = (traceparent?: string) =>
    traceparent ? [{ key: 'traceparent', value: Buffer.from(traceparent) }] : [];

  return {
    endpoint: `127.0.0.1:${port}`,
    loginUrl,
    clientId,
    clientSecret,
    orgId,
    fetchRequests,
    managedRequests,
    createManagedSubscription(developerName, topicName, o = {}) {
      const topic = topics.get(topicName);
      if (!topic) throw new Error(`no topic ${topicName}`);
      // The key prefix of ManagedEventSubscription records, then a 15-character id.
      const id = `18x${randomBytes(8).toString('hex').toUpperCase().slice(0, 15)}`;
      managed.set(id, { id, developerName, topic, replayPreset: o.replayPreset ?? 'LATEST' });
      return id;
    },
    committedReplayId: (name) =>
      [...managed.values()]
        .find((m) => m.developerName === name || m.id === name)
        ?.committed?.toString('base64'),
    refuseNextCommit(msg) {
      refuseCommit = msg;
    },
    deliveries: (eventId) => delivered.get(eventId) ?? 0,
    tokensIssued: () => issued,
    revokeTokens: () => tokens.clear(),
    emitChange(entity, c) {
      const topic = topics.get(`/data/${entity}ChangeEvent`) as Topic;
      const changed = c.changedFields ?? Object.keys(c.fields);
      const record: Record<string, unknown> = {
        ChangeEventHeader: {
          entityName: entity,
          recordIds: c.recordIds,
          changeType: c.changeType ?? 'UPDATE',
          changeOrigin: 'com/salesforce/api/rest/62.0;client=parley-local',
          transactionKey: `${(++tx).toString(16).padStart(8, '0')}-local`,
          sequenceNumber: 1,
          commitTimestamp: c.commitTimestamp ?? Date.now(),
          commitNumber: Number(replaySeq),
          commitUser: c.commitUser ?? '005000000000001AAA',
          nulledFields: [],
          diffFields: [],
          changedFields: encodeFieldBitmap(topic.type, changed),
        },
      };
      for (const f of (topic.type as unknown as { fields: { name: string }[] }).fields.slice(1)) {
        record[f.name] = c.fields[f.name] ?? null;
      }
      const id = randomUUID();
      const ce = append(topic, {
        id,
        schema_id: topic.schemaId,
        payload: topic.type.toBuffer(record),
        headers: headersOf(c.traceparent),
      });
      return { id, replayId: ce.replay_id.toString('base64') };
    },
    emitPlatformEvent(name, fields, opts = {}) {
      const topic = topics.get(name);
      if (!topic) throw new Error(`no topic ${name}`);
      const record: Record<string, unknown> = { CreatedDate: Date.now(), CreatedById: '005000000000001AAA' };
      for (const f of (topic.type as unknown as { fields: { name: string }[] }).fields)
        record[f.name] ??= fields[f.name] ?? null;
      const id = randomUUID();
      append(topic, {
        id,
        schema_id: topic.schemaId,
        payload: topic.type.toBuffer(record),
        headers: headersOf(opts.traceparent),
      });
      return { id };
    },
    emitMalformed(name) {
      const topic = topics.get(name) as Topic;
      const id = randomUUID();
      append(topic, {
        id,
        schema_id: topic.schemaId,
        payload: Buffer.from([0xff, 0xff, 0xff, 0x01]),
        headers: [],
      });
      return { id };
    },
    published: (name) => published.get(name) ?? [],
    async outage() {
      for (const s of subscribers) s.call.destroy(failure(grpc.status.UNAVAILABLE, 'server shutting down'));
      subscribers.clear();
      server?.forceShutdown();
    },
    async resume() {
      await listen();
    },
    async stop() {
      server?.forceShutdown();
      await new Promise<void>((r) => http.close(() => r()));
    },
  };
}
