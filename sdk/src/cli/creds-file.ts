/** Writing creds files: mode 0600, never over an existing file (creds are shown once). */
import { existsSync } from 'node:fs';
import { chmod, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';

/** Throws unless `path` is free; call before creating anything, so a refusal changes nothing. */
export function assertWritable(path: string): string {
  const abs = resolve(path);
  if (existsSync(abs)) {
    throw new Error(`${path} already exists: choose another --out (creds are never overwritten)`);
  }
  return abs;
}

/** Writes a creds file readable by its owner only. */
export async function writeCredsFile(path: string, creds: string): Promise<void> {
  await writeFile(path, creds, { mode: 0o600, flag: 'wx' });
  await chmod(path, 0o600);
}
