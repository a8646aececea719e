/**
 * The Pub/Sub API's gRPC definitions, loaded from `proto/pubsub_api.proto` with proto-loader
 * (field names as in the proto, bytes as Buffers, enums as their names), and the message shapes the
 * bridge and the test server use.
 */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

/** The proto file (shipped with the package, beside `dist/` and `src/`). */
export const PROTO_PATH = fileURLToPath(new URL('../../proto/pubsub_api.proto', import.meta.url));

/** Where a subscription without a replay id starts (`CUSTOM`: after `replay_id`). */
export type ReplayPreset = 'LATEST' | 'EARLIEST' | 'CUSTOM';

/** A header of an event (`traceparent` travels here). */
export interface EventHeader {
  key: string;
  value: Buffer;
}
/** An event as published: id, schema, Avro payload, headers. */
export interface ProducerEvent {
  id: string;
  schema_id: string;
  payload: Buffer;
  headers: EventHeader[];
}
/** An event as delivered, with its replay id (the cursor). */
export interface ConsumerEvent {
  event: ProducerEvent;
  replay_id: Buffer;
}
/** A request on the Subscribe stream: the first names topic and start, each asks for more. */
export interface FetchRequest {
  topic_name: string;
  replay_preset?: ReplayPreset;
  replay_id?: Buffer;
  num_requested: number;
  auth_refresh?: string;
}
/** A batch on the Subscribe stream (empty: a keepalive). */
export interface FetchResponse {
  events: ConsumerEvent[];
  latest_replay_id: Buffer;
  rpc_id: string;
  pending_num_requested: number;
}
/** Commits a replay id on a ManagedSubscribe stream; the id names the answer. */
export interface CommitReplayRequest {
  commit_request_id: string;
  replay_id: Buffer;
}
/** The answer to one or more commits (the last of them): committed, or `error` (code COMMIT). */
export interface CommitReplayResponse {
  commit_request_id: string;
  replay_id: Buffer;
  error?: { code: 'UNKNOWN' | 'PUBLISH' | 'COMMIT'; msg: string } | null;
  /** When the server received the request (ms since the epoch; a string: longs are loaded as strings). */
  process_time: string;
}
/**
 * A request on the ManagedSubscribe stream: the first names the subscription (id or developer name),
 * later ones ask for more (`num_requested`) or commit a replay id.
 */
export interface ManagedFetchRequest {
  subscription_id?: string;
  developer_name?: string;
  num_requested?: number;
  auth_refresh?: string;
  commit_replay_id_request?: CommitReplayRequest;
}
/** Events, or a commit's answer, on the ManagedSubscribe stream. */
export interface ManagedFetchResponse {
  events: ConsumerEvent[];
  latest_replay_id: Buffer;
  rpc_id: string;
  pending_num_requested: number;
  commit_response?: CommitReplayResponse | null;
}
/** The Avro schema (JSON) of a schema id. */
export interface SchemaInfo {
  schema_json: string;
  schema_id: string;
  rpc_id: string;
}
/** A topic's permissions and schema id. */
export interface TopicInfo {
  topic_name: string;
  tenant_guid: string;
  can_publish: boolean;
  can_subscribe: boolean;
  schema_id: string;
  rpc_id: string;
}
/** The outcome of one published event. */
export interface PublishResult {
  replay_id: Buffer;
  error?: { code: 'UNKNOWN' | 'PUBLISH' | 'COMMIT'; msg: string } | null;
  correlation_key: string;
}
/** Events to publish on a topic. */
export interface PublishRequest {
  topic_name: string;
  events: ProducerEvent[];
}
/** The outcomes of a Publish. */
export interface PublishResponse {
  results: PublishResult[];
  schema_id: string;
  rpc_id: string;
}

/** The `eventbus.v1.PubSub` client, as grpc-js builds it. */
export interface PubSubClient extends grpc.Client {
  Subscribe(metadata: grpc.Metadata): grpc.ClientDuplexStream<FetchRequest, FetchResponse>;
  /** Open beta at Salesforce: the server keeps the committed replay id of a managed subscription. */
  ManagedSubscribe(
    metadata: grpc.Metadata,
  ): grpc.ClientDuplexStream<ManagedFetchRequest, ManagedFetchResponse>;
  GetSchema(
    req: { schema_id: string },
    metadata: grpc.Metadata,
    cb: (err: grpc.ServiceError | null, res?: SchemaInfo) => void,
  ): grpc.ClientUnaryCall;
  GetTopic(
    req: { topic_name: string },
    metadata: grpc.Metadata,
    cb: (err: grpc.ServiceError | null, res?: TopicInfo) => void,
  ): grpc.ClientUnaryCall;
  Publish(
    req: PublishRequest,
    metadata: grpc.Metadata,
    cb: (err: grpc.ServiceError | null, res?: PublishResponse) => void,
  ): grpc.ClientUnaryCall;
}

let loaded: grpc.GrpcObject | undefined;

/** The loaded `eventbus.v1` package (cached). */
export function eventbus(): {
  PubSub: grpc.ServiceClientConstructor;
} {
  loaded ??= grpc.loadPackageDefinition(
    protoLoader.loadSync(PROTO_PATH, { keepCase: true, longs: String, enums: String, defaults: true }),
  );
  return (loaded.eventbus as grpc.GrpcObject).v1 as unknown as { PubSub: grpc.ServiceClientConstructor };
}
