// The built package itself: what npm would publish from wasm/pkg/.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "pkg");
const wasm = readFileSync(join(pkg, "idemkit_wasm_bg.wasm"));

test("the .wasm imports nothing from env (only wasm-bindgen's own glue)", () => {
  const modules = new Set(WebAssembly.Module.imports(new WebAssembly.Module(wasm)).map((i) => i.module));
  assert.ok(!modules.has("env"));
  assert.deepEqual([...modules], ["./idemkit_wasm_bg.js"]);
});

test("the README states the gzipped size of this very .wasm", () => {
  const readme = readFileSync(join(pkg, "README.md"), "utf8");
  const kib = (gzipSync(wasm, { level: 9 }).length / 1024).toFixed(1);
  assert.ok(readme.includes(`${kib} KiB gzipped`), `README should say ${kib} KiB gzipped`);
  console.log(`.wasm: ${kib} KiB gzipped, ${(wasm.length / 1024).toFixed(1)} KiB raw`);
});

test("package.json: ESM, types, one entry per runtime, every listed file present", () => {
  const manifest = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8"));
  assert.equal(manifest.name, "idemkit");
  assert.equal(manifest.type, "module");
  const root = manifest.exports["."];
  assert.deepEqual(Object.keys(root), ["types", "workerd", "deno", "bun", "node", "default"]);
  for (const target of Object.values(root)) assert.ok(existsSync(join(pkg, target)), target);
  for (const file of manifest.files) assert.ok(existsSync(join(pkg, file)), file);
});
