export { isParleyError, ParleyError } from '@parley/contracts';
export * from './agent.js';
export * from './approvals.js';
export * from './bindings.js';
export * from './connect.js';
export * from './contacts.js';
export * from './cursor-store.js';
export type {
  CursorStore,
  Delivery,
  DeliveryEvent,
  DeliveryOptions,
  PullBatch,
  PulledDelivery,
  PullOptions,
  RetentionGap,
} from './delivery.js';
export { deliveryEventOf } from './delivery.js';
export * from './directory.js';
export type { ErrorListener, Failure, FailureOptions, FailureSource, SdkLogger } from './failures.js';
export * from './local-home.js';
export * from './presence.js';
export * from './retry.js';
export * from './rooms.js';
export * from './tasks.js';
export * from './tokens.js';
export * from './tools.js';
export * from './usage.js';
