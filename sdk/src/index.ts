export { isParleyError, ParleyError } from '@parley/contracts';
export * from './agent.js';
export * from './connect.js';
export type { CursorStore, Delivery, DeliveryEvent, DeliveryOptions } from './delivery.js';
export * from './rooms.js';
