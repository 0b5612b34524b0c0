// Builds a Miniflare (workerd) instance the way Wrangler would deploy the package:
// the `idemkit` bare import resolves to the package's "workerd" entry, and the .wasm
// is a CompiledWasm module.
import { readdirSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";

const wasmDir = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const pkg = join(wasmDir, "pkg");

function walk(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : [path];
  });
}

/**
 * The modules of a Worker whose code is `scripts` (ESM files, absolute, the first the
 * entry) with the package's modules, `idemkit` resolving to its "workerd" entry.
 * @param {string[]} scripts
 */
export function workerModules(scripts) {
  const modules = scripts.map((path) => ({ type: "ESModule", path }));
  for (const path of walk(pkg)) {
    if (path.endsWith(".js")) modules.push({ type: "ESModule", path });
    if (path.endsWith(".wasm")) modules.push({ type: "CompiledWasm", path });
  }
  // The bare specifier `idemkit` resolves to the package's "workerd" entry, as
  // Wrangler's bundler does through the export conditions of pkg/package.json.
  // workerd itself resolves a bare name next to the importing module, so each
  // importing folder gets an `idemkit` module that re-exports the entry.
  for (const dir of new Set(scripts.map((path) => dirname(path)))) {
    modules.push({
      type: "ESModule",
      path: join(dir, "idemkit"),
      contents: `export * from ${JSON.stringify(relative(dir, join(pkg, "entry-workerd.js")))};`,
    });
  }
  return { modules, modulesRoot: wasmDir, compatibilityDate: "2026-04-01" };
}

/**
 * @param {string[]} scripts ESM files (absolute), the first is the entry
 * @param {object} options extra Miniflare options (bindings)
 */
export function miniflare(scripts, options) {
  return new Miniflare({ ...workerModules(scripts), ...options });
}
