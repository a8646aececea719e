import { isParleyError } from '@parley/contracts';

/** The Parley error code of `err`, or a description of what else it was (for assertions). */
export const errorCode = (err: unknown): string =>
  isParleyError(err) ? err.code : `not a ParleyError: ${err instanceof Error ? err.message : String(err)}`;

/** The code a promise is rejected with, or "no error". */
export async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    return errorCode(err);
  }
  return 'no error';
}
