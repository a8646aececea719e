/**
 * An OTLP/HTTP trace receiver for tests: a real HTTP server on a free loopback port accepting
 * `POST /v1/traces` in JSON (`application/json`) and protobuf (`application/x-protobuf`, decoded
 * with protobufjs from the OTLP v1 trace schema below), exposing what arrived as simple spans.
 * Point `OTEL_EXPORTER_OTLP_ENDPOINT` at `receiver.url`.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';
import protobuf from 'protobufjs';

/** An attribute value as OTLP carries it. */
export type AttributeValue = string | number | boolean | AttributeValue[] | { [key: string]: AttributeValue };

/** A received span, in a shape tests can assert on. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** Undefined for a root span. */
  parentSpanId: string | undefined;
  name: string;
  kind: 'unspecified' | 'internal' | 'server' | 'client' | 'producer' | 'consumer';
  attributes: Record<string, AttributeValue>;
  status: { code: 'unset' | 'ok' | 'error'; message?: string };
  /** The resource's `service.name`. */
  service: string;
  resource: Record<string, AttributeValue>;
  startTimeUnixNano: bigint;
  endTimeUnixNano: bigint;
  /** The encoding the exporter used. */
  format: 'json' | 'protobuf';
}

/** How the receiver answers: normally, never (a stuck collector), or with 503 (a failing one). */
export type ReceiverBehaviour = 'accept' | 'hang' | 'fail';

/** A running receiver; `close()` it in `after`. */
export interface OtlpReceiver {
  /** Base URL for `OTEL_EXPORTER_OTLP_ENDPOINT`, e.g. `http://127.0.0.1:43817`. */
  url: string;
  /** Every span received so far, in arrival order. */
  readonly spans: ReceivedSpan[];
  /** Export requests received (including unanswered ones), with their content type. */
  readonly requests: { contentType: string; spans: number }[];
  /** Requests being held open (behaviour `hang`). */
  pending(): number;
  /**
   * Resolves with the received spans once `predicate(spans)` holds (checked on every arrival),
   * or rejects after `timeoutMs` naming `what`.
   */
  waitForSpans(
    predicate: (spans: ReceivedSpan[]) => boolean,
    options?: { what?: string; timeoutMs?: number },
  ): Promise<ReceivedSpan[]>;
  /** Forgets what was received. */
  clear(): void;
  /** Answers held requests with 503 and stops. */
  close(): Promise<void>;
}

// The OTLP v1 trace messages (opentelemetry/proto collector/trace/v1, trace/v1, resource/v1,
// common/v1) as the specification numbers their fields: enough to decode an export request.
const OTLP_TRACE_PROTO = `
syntax = "proto3";
package opentelemetry.proto;
message AnyValue {
  oneof value {
    string string_value = 1;
    bool bool_value = 2;
    int64 int_value = 3;
    double double_value = 4;
    ArrayValue array_value = 5;
    KeyValueList kvlist_value = 6;
    bytes bytes_value = 7;
  }
}
message ArrayValue { repeated AnyValue values = 1; }
message KeyValueList { repeated KeyValue values = 1; }
message KeyValue { string key = 1; AnyValue value = 2; }
message InstrumentationScope {
  string name = 1;
  string version = 2;
  repeated KeyValue attributes = 3;
  uint32 dropped_attributes_count = 4;
}
message Resource { repeated KeyValue attributes = 1; uint32 dropped_attributes_count = 2; }
message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; string schema_url = 3; }
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; string schema_url = 3; }
message Span {
  bytes trace_id = 1;
  bytes span_id = 2;
  string trace_state = 3;
  bytes parent_span_id = 4;
  fixed32 flags = 16;
  string name = 5;
  int32 kind = 6;
  fixed64 start_time_unix_nano = 7;
  fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9;
  uint32 dropped_attributes_count = 10;
  repeated Event events = 11;
  uint32 dropped_events_count = 12;
  repeated Link links = 13;
  uint32 dropped_links_count = 14;
  Status status = 15;
  message Event {
    fixed64 time_unix_nano = 1;
    string name = 2;
    repeated KeyValue attributes = 3;
    uint32 dropped_attributes_count = 4;
  }
  message Link {
    bytes trace_id = 1;
    bytes span_id = 2;
    string trace_state = 3;
    repeated KeyValue attributes = 4;
    uint32 dropped_attributes_count = 5;
    fixed32 flags = 6;
  }
}
message Status { string message = 2; int32 code = 3; }
`;
const ExportTraceServiceRequest = protobuf
  .parse(OTLP_TRACE_PROTO)
  .root.lookupType('opentelemetry.proto.ExportTraceServiceRequest');

const KINDS: ReceivedSpan['kind'][] = ['unspecified', 'internal', 'server', 'client', 'producer', 'consumer'];
const STATUS: ReceivedSpan['status']['code'][] = ['unset', 'ok', 'error'];

// Both encodings normalised to the proto3 JSON mapping (camelCase keys, enums as numbers, 64-bit
// integers as strings); only ids differ: hex in OTLP/JSON, base64 from protobufjs.
type Json = Record<string, unknown>;
type IdOf = (v: unknown) => string;
const hexId: IdOf = (v) => (typeof v === 'string' ? v.toLowerCase() : '');
const base64Id: IdOf = (v) => (typeof v === 'string' ? Buffer.from(v, 'base64').toString('hex') : '');

function anyValue(v: Json | undefined): AttributeValue {
  if (!v) return '';
  if ('stringValue' in v) return String(v.stringValue);
  if ('boolValue' in v) return Boolean(v.boolValue);
  if ('intValue' in v) return Number(v.intValue);
  if ('doubleValue' in v) return Number(v.doubleValue);
  if ('arrayValue' in v) return (((v.arrayValue as Json)?.values as Json[]) ?? []).map((x) => anyValue(x));
  if ('kvlistValue' in v) return attributes(((v.kvlistValue as Json)?.values as Json[]) ?? []);
  if ('bytesValue' in v) return String(v.bytesValue);
  return '';
}

function attributes(list: Json[] | undefined): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = {};
  for (const kv of list ?? []) out[String(kv.key)] = anyValue(kv.value as Json | undefined);
  return out;
}

function toSpans(request: Json, idOf: IdOf, format: ReceivedSpan['format']): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const rs of (request.resourceSpans as Json[]) ?? []) {
    const resource = attributes((rs.resource as Json | undefined)?.attributes as Json[]);
    for (const ss of (rs.scopeSpans as Json[]) ?? []) {
      for (const s of (ss.spans as Json[]) ?? []) {
        const parent = idOf(s.parentSpanId);
        const status = (s.status as Json | undefined) ?? {};
        const message = status.message ? String(status.message) : undefined;
        out.push({
          traceId: idOf(s.traceId),
          spanId: idOf(s.spanId),
          parentSpanId: parent && !/^0+$/.test(parent) ? parent : undefined,
          name: String(s.name ?? ''),
          kind: KINDS[Number(s.kind ?? 0)] ?? 'unspecified',
          attributes: attributes(s.attributes as Json[]),
          status: { code: STATUS[Number(status.code ?? 0)] ?? 'unset', ...(message ? { message } : {}) },
          service: String(resource['service.name'] ?? ''),
          resource,
          startTimeUnixNano: BigInt(String(s.startTimeUnixNano ?? 0)),
          endTimeUnixNano: BigInt(String(s.endTimeUnixNano ?? 0)),
          format,
        });
      }
    }
  }
  return out;
}

/** Decodes an OTLP/HTTP trace export body. */
export function decodeTraceExport(body: Uint8Array, contentType: string): ReceivedSpan[] {
  if (contentType.includes('json')) {
    return toSpans(JSON.parse(Buffer.from(body).toString('utf8')) as Json, hexId, 'json');
  }
  const message = ExportTraceServiceRequest.decode(body);
  const plain = ExportTraceServiceRequest.toObject(message, {
    longs: String,
    enums: Number,
    bytes: String,
  }) as Json;
  return toSpans(plain, base64Id, 'protobuf');
}

async function readBody(req: IncomingMessage): Promise<Uint8Array> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const raw = Buffer.concat(chunks);
  return req.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw;
}

/** Starts a receiver on a free loopback port. */
export async function startOtlpReceiver(
  options: { behaviour?: ReceiverBehaviour } = {},
): Promise<OtlpReceiver> {
  const behaviour = options.behaviour ?? 'accept';
  const spans: ReceivedSpan[] = [];
  const requests: { contentType: string; spans: number }[] = [];
  const held = new Set<ServerResponse>();
  const waiters = new Set<() => void>();
  const notify = () => {
    for (const w of [...waiters]) w();
  };

  const server = createServer((req, res) => {
    void (async () => {
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      const contentType = String(req.headers['content-type'] ?? '');
      let received: ReceivedSpan[];
      try {
        received = decodeTraceExport(await readBody(req), contentType);
      } catch (err) {
        res.writeHead(400, { 'content-type': 'text/plain' }).end(`cannot decode: ${(err as Error).message}`);
        return;
      }
      requests.push({ contentType, spans: received.length });
      if (behaviour === 'hang') {
        held.add(res);
        res.on('close', () => held.delete(res));
        notify();
        return;
      }
      if (behaviour === 'fail') {
        res.writeHead(503).end();
        notify();
        return;
      }
      spans.push(...received);
      if (contentType.includes('json')) res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      // An empty ExportTraceServiceResponse encodes to zero bytes.
      else res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
      notify();
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    requests,
    pending: () => held.size,
    waitForSpans(predicate, o = {}) {
      const timeoutMs = o.timeoutMs ?? 30_000;
      return new Promise((resolve, reject) => {
        const check = () => {
          if (!predicate(spans)) return;
          clearTimeout(timer);
          waiters.delete(check);
          resolve(spans);
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(
            new Error(
              `timed out after ${timeoutMs} ms waiting for ${o.what ?? 'spans'}; received: ${spans
                .map((s) => `${s.service}:${s.name}`)
                .join(', ')}`,
            ),
          );
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
    clear() {
      spans.length = 0;
      requests.length = 0;
    },
    async close() {
      for (const res of held) res.writeHead(503).end();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
