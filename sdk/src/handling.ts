import { AsyncLocalStorage } from 'node:async_hooks';

/** What is being handled right now in this async context (set by the delivery engine). */
export interface HandlingContext {
  /** The message whose handler is running. */
  messageId: string;
  /** Its hop count. */
  hop: number;
  room: string;
  /** The message that caused it (for audit records of what the handler does). */
  causedBy?: string | undefined;
  /**
   * A delegation token the message handed to this participant (its `onBehalfOf.token`, when this
   * participant is the token's current actor): sends and tool calls inside the handler act under it
   * unless told otherwise.
   */
  delegation?: string | undefined;
}

/**
 * The delivery a handler is running for, so messages it sends carry `causedBy` and `hop + 1`
 * without the handler passing them along.
 */
export const handling = new AsyncLocalStorage<HandlingContext>();
