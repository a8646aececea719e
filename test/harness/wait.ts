/**
 * Resolves when `condition` returns true (polled), or rejects after `timeoutMs` with `what` (a
 * function is asked at the timeout, so the error can say how far it got). The default bound is
 * generous on purpose: CI and developers run the suite on busy machines, and a wait that holds
 * returns at once.
 */
export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  what: string | (() => string),
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return;
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${typeof what === 'function' ? what() : what}`,
      );
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** What `promise` resolves to, or `late` if it has not settled within `ms` (its timer is cleared). */
export async function within<T, U>(promise: Promise<T>, ms: number, late: U): Promise<T | U> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<U>((r) => {
        timer = setTimeout(() => r(late), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
