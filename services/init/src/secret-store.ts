import { chmod, mkdir, readdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** What a store holds: entry name → contents, and a version for optimistic updates. */
export interface StoredSecret {
  data: Record<string, string>;
  /** Opaque; passed back to {@link SecretStore.update}. */
  version: string;
}

/**
 * Where the key material of a deployment lives: one Kubernetes Secret, or one directory. Only these
 * three operations are needed, so a Job's Role can be this narrow.
 */
export interface SecretStore {
  /** A description for logs and errors, e.g. `secret parley/parley-keys`. */
  readonly where: string;
  /** The stored entries, or undefined when there is nothing yet. */
  read(): Promise<StoredSecret | undefined>;
  /** Stores `data` if nothing is stored yet; false when something already was (a concurrent run won). */
  create(data: Record<string, string>): Promise<boolean>;
  /** Replaces the entries; false when `version` is no longer current (re-read and retry). */
  update(data: Record<string, string>, version: string): Promise<boolean>;
}

const ENTRY = /^[-._a-zA-Z0-9]+$/;

/** Entry names are file names in a directory and keys in a Secret: both accept this alphabet. */
export function checkEntryName(name: string): void {
  if (!ENTRY.test(name) || name === '.' || name === '..') throw new Error(`invalid entry name: ${name}`);
}

/**
 * A directory of files, each mode 0600 (compose: a volume shared by the init container, NATS and the
 * services, which all run as the same user). Writes go through a temporary file and a rename, so a
 * reader never sees half a file.
 */
export function createDirSecretStore(dir: string): SecretStore {
  const marker = join(dir, '.version');
  const write = async (data: Record<string, string>) => {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    for (const [name, content] of Object.entries(data)) {
      checkEntryName(name);
      const tmp = join(dir, `.${name}.tmp`);
      await writeFile(tmp, content, { mode: 0o600 });
      await chmod(tmp, 0o600);
      await rename(tmp, join(dir, name));
    }
  };
  return {
    where: `directory ${dir}`,
    async read() {
      let names: string[];
      try {
        names = await readdir(dir);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
        throw err;
      }
      const data: Record<string, string> = {};
      for (const name of names) {
        if (name.startsWith('.')) continue;
        data[name] = await readFile(join(dir, name), 'utf8');
      }
      if (Object.keys(data).length === 0) return undefined;
      const version = await readFile(marker, 'utf8').catch(() => '0');
      return { data, version };
    },
    async create(data) {
      if (await this.read()) return false;
      await write(data);
      await writeFile(marker, '1');
      return true;
    },
    async update(data, version) {
      const current = await readFile(marker, 'utf8').catch(() => '0');
      if (current !== version) return false;
      await write(data);
      await writeFile(marker, String(Number(current) + 1));
      return true;
    },
  };
}
