import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import preact from '@preact/preset-vite';
import { defineConfig, type Plugin } from 'vite';

/** Writes `<file>.gz` next to every text asset, so the gateway serves them compressed (preCompressed). */
function gzipAssets(): Plugin {
  let outDir = 'dist';
  return {
    name: 'parley-gzip',
    apply: 'build',
    configResolved(c) {
      outDir = c.build.outDir;
    },
    closeBundle() {
      const walk = (dir: string) => {
        for (const name of readdirSync(dir)) {
          const p = join(dir, name);
          if (statSync(p).isDirectory()) walk(p);
          else if (/\.(js|css|html|svg|json)$/.test(name))
            writeFileSync(`${p}.gz`, gzipSync(readFileSync(p), { level: 9 }));
        }
      };
      walk(outDir);
    },
  };
}

export default defineConfig({
  plugins: [preact(), gzipAssets()],
  build: { outDir: 'dist', emptyOutDir: true, sourcemap: false, chunkSizeWarningLimit: 600 },
});
