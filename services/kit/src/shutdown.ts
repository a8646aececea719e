import type { NatsConnection } from '@nats-io/transport-node';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';

/**
 * One stop of a process, step by step within one deadline: a step still running past its bound is
 * abandoned and named, so a stop that hangs says where (and the process still ends in time — before
 * the kubelet's SIGKILL at the pod's `terminationGracePeriodSeconds`).
 */
export interface Shutdown {
  /** The steps abandoned while they ran (at their bound or the deadline), by name. */
  readonly abandoned: readonly string[];
  /** The steps not run because the deadline had passed, by name. */
  readonly notRun: readonly string[];
  /** Whether any step was abandoned or not run. */
  incomplete(): boolean;
  /**
   * Runs `fn` within what is left of the deadline and at most `boundMs` (default 10 s). A step that
   * fails is logged and counts as done; one still running at its bound is abandoned.
   */
  step(name: string, fn: () => unknown, boundMs?: number): Promise<void>;
  /**
   * The step `the NATS connections`: drains them within what is left of the deadline (a drain waits
   * for every subscription's handler), or closes them once a step was given up; closed anyway when
   * the drain is given up too.
   */
  connections(connections: readonly NatsConnection[]): Promise<void>;
}

/** A {@link Shutdown} that must end within `deadlineMs` from now. */
export function createShutdown(deadlineMs: number, log: Logger): Shutdown {
  const deadline = Date.now() + deadlineMs;
  const abandoned: string[] = [];
  const notRun: string[] = [];
  const shutdown: Shutdown = {
    abandoned,
    notRun,
    incomplete: () => abandoned.length + notRun.length > 0,
    async step(name, fn, boundMs = 10_000) {
      const left = Math.min(boundMs, deadline - Date.now());
      if (left <= 0) {
        notRun.push(name);
        return;
      }
      let timer: NodeJS.Timeout | undefined;
      const done = await Promise.race([
        Promise.resolve()
          .then(fn)
          .then(
            () => true,
            (err: unknown) => {
              log.warn({ err }, `${name}: stop failed`);
              return true;
            },
          ),
        new Promise<boolean>((r) => {
          timer = setTimeout(() => r(false), left);
        }),
      ]);
      clearTimeout(timer);
      if (!done) abandoned.push(name);
    },
    async connections(connections) {
      await shutdown.step(
        'the NATS connections',
        () => Promise.allSettled(connections.map((c) => (shutdown.incomplete() ? c.close() : c.drain()))),
        Number.POSITIVE_INFINITY,
      );
      if (shutdown.incomplete()) await Promise.allSettled(connections.map((c) => c.close()));
    },
  };
  return shutdown;
}

/**
 * Closes a Fastify server: requests in flight may finish, and a client that does not read its
 * response (or holds a stream open) is cut off after `graceMs`.
 */
export async function closeHttpServer(app: FastifyInstance, graceMs = 2_000): Promise<void> {
  const cut = setTimeout(() => app.server.closeAllConnections(), graceMs);
  try {
    await app.close();
  } finally {
    clearTimeout(cut);
  }
}
