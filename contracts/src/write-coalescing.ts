import type { NatsConnection } from '@nats-io/nats-core';

/** The part of nats.js's protocol handler that {@link coalesceWrites} replaces. */
interface Protocol {
  outbound: { length(): number; size(): number; fill(buf: Uint8Array, ...payloads: Uint8Array[]): void };
  pendingLimit: number;
  flushPending(): void;
  close(err?: Error): Promise<void>;
  sendCommand(cmd: string | Uint8Array, ...payloads: Uint8Array[]): void;
}

const encoder = new TextEncoder();

/**
 * Makes `nc` write what it sends once per turn of the event loop instead of once per microtask
 * checkpoint. nats.js schedules a socket write with `queueMicrotask` when its outbound buffer goes
 * from empty to not; a service's sends are spread over the many microtask checkpoints of one turn
 * (every `await` of a request it handles), so each became a write of its own. `setImmediate` runs
 * after the turn's I/O callbacks: every command queued in them goes out in one write. The buffer
 * is still written at once at nats.js's flush threshold (32 KiB), `flush()`'s PING goes out as
 * before, and `close()` writes the buffer first. The services' connections and the SDK's use it
 * (an agent acknowledges every delivery: at a backlog, the acks of one socket read go out in one
 * write). Returns whether the client had the shape this relies on (nats.js 3.x) and the runtime has
 * `setImmediate` (Node; not a browser); when not, the connection is left as it is.
 */
export function coalesceWrites(nc: NatsConnection): boolean {
  const p = (nc as unknown as { protocol?: Partial<Protocol> }).protocol;
  if (
    typeof setImmediate !== 'function' ||
    !p ||
    typeof p.sendCommand !== 'function' ||
    typeof p.flushPending !== 'function' ||
    typeof p.close !== 'function' ||
    typeof p.outbound?.fill !== 'function' ||
    typeof p.pendingLimit !== 'number'
  )
    return false;
  const protocol = p as Protocol;
  const flush = () => protocol.flushPending();
  protocol.sendCommand = (cmd, ...payloads) => {
    const empty = protocol.outbound.length() === 0;
    protocol.outbound.fill(typeof cmd === 'string' ? encoder.encode(cmd) : cmd, ...payloads);
    if (empty) setImmediate(flush);
    else if (protocol.outbound.size() >= protocol.pendingLimit) protocol.flushPending();
  };
  // nats.js closes the socket without writing its buffer: its microtask had always run by then,
  // this turn's immediate may not have.
  const close = protocol.close.bind(protocol);
  protocol.close = (err) => {
    protocol.flushPending();
    return close(err);
  };
  return true;
}
