import type { Logger } from 'pino';
import { deriveMissing, entries, type LayoutOptions } from './layout.js';
import type { SecretStore } from './secret-store.js';

/** What {@link ensureKeys} did. */
export interface EnsureKeysResult {
  /** `created`: nothing was stored; `completed`: entries were added; `unchanged`: all were there. */
  action: 'created' | 'completed' | 'unchanged';
  /** Names of the entries written. */
  written: string[];
  /** Every entry, as stored now. */
  data: Record<string, string>;
}

/**
 * Makes sure `store` holds a deployment's key material: generates everything when it is empty, adds
 * what is missing (a new service's creds, or everything but keys.json when a platform team brought
 * its own keys), and never replaces an entry. Safe to run concurrently: a lost race re-reads.
 */
export async function ensureKeys(
  store: SecretStore,
  options: LayoutOptions & { log: Logger },
): Promise<EnsureKeysResult> {
  const log = options.log.child({ component: 'keys', store: store.where });
  for (let attempt = 0; attempt < 5; attempt++) {
    const current = await store.read();
    const existing = current?.data ?? {};
    if (current && existing[entries.keys] === undefined) {
      throw new Error(
        `${store.where} exists but has no ${entries.keys}: it is not Parley key material (choose another name, or add ${entries.keys})`,
      );
    }
    const added = await deriveMissing(existing, options);
    const written = Object.keys(added).sort();
    if (!current) {
      if (await store.create(added)) {
        log.info({ written }, 'key material created');
        return { action: 'created', written, data: added };
      }
      log.info('another run created the key material first; reading it');
      continue;
    }
    if (written.length === 0) {
      log.info('key material complete');
      return { action: 'unchanged', written, data: existing };
    }
    const data = { ...existing, ...added };
    if (await store.update(data, current.version)) {
      log.info({ written }, 'key material completed');
      return { action: 'completed', written, data };
    }
    log.info('the key material changed while completing it; reading it again');
  }
  throw new Error(`${store.where} kept changing while parley-init completed it; run it again`);
}
