/** Writes docs/configuration.md from the config schemas (see config-docs.ts). Run with `pnpm generate`. */
import { writeFileSync } from 'node:fs';
import { CONFIG_DOCS_PATH, renderConfigDocs } from './config-docs.js';

writeFileSync(new URL(`../../${CONFIG_DOCS_PATH}`, import.meta.url), renderConfigDocs());
console.log(`wrote ${CONFIG_DOCS_PATH}`);
