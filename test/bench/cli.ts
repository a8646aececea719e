/** What the bench commands share on their command line. */

/** Prints `message` and the usage to stderr and exits 2 (bad input). */
export function usageError(message: string, usage: string): never {
  process.stderr.write(`${message}\n\n${usage}`);
  process.exit(2);
}

/** A whole number of at least `min` from flag `name`, or `fallback` when it is absent. */
export function wholeNumber(
  usage: string,
  name: string,
  value: string | undefined,
  fallback: number,
  min: number,
): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min)
    usageError(`--${name} must be a whole number ≥ ${min}, not “${value}”`, usage);
  return n;
}
