import { AsyncLocalStorage } from 'node:async_hooks';

/** What is being handled right now in this async context (set by the delivery engine). */
export interface HandlingContext {
  /** The message whose handler is running. */
  messageId: string;
  /** Its hop count. */
  hop: number;
  room: string;
}

/**
 * The delivery a handler is running for, so messages it sends carry `causedBy` and `hop + 1`
 * without the handler passing them along.
 */
export const handling = new AsyncLocalStorage<HandlingContext>();
