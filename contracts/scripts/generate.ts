/** Writes the generated protocol documents (see protocol-docs.ts). Run with `pnpm generate`. */
import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { generateProtocolDocs } from './protocol-docs.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const files = generateProtocolDocs();
const schemaDir = join(root, 'docs/protocol/schemas');
await mkdir(schemaDir, { recursive: true });
// Schemas that no longer exist in the contracts must not linger.
for (const f of await readdir(schemaDir)) {
  if (!files.has(`docs/protocol/schemas/${f}`)) await rm(join(schemaDir, f));
}
for (const [path, content] of files) {
  await mkdir(dirname(join(root, path)), { recursive: true });
  await writeFile(join(root, path), content);
}
console.log(`wrote ${files.size} files under docs/`);
