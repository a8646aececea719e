/** Writes docs/gateway/openapi.json from the route table and the contracts (`pnpm generate`). */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { openApiDocument } from '../src/openapi.js';

const out = join(import.meta.dirname, '../../../docs/gateway/openapi.json');
await writeFile(out, `${JSON.stringify(openApiDocument(), null, 2)}\n`);
process.stdout.write(`wrote ${out}\n`);
