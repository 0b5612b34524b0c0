// The README's JavaScript examples run as tests, in Node, Deno and Bun: every ```js
// block except those preceded by `<!-- not run: reason -->` (platform snippets whose
// behaviour the Workers and Deno suites cover).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const wasmDir = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const readme = readFileSync(join(wasmDir, "README.md"), "utf8");
const scratch = join(wasmDir, "test", ".readme");
rmSync(scratch, { recursive: true, force: true });
mkdirSync(scratch, { recursive: true });

const blocks = [];
const fence = /(<!-- not run: [^>]*-->\s*\n)?```js\n([\s\S]*?)```/g;
for (const m of readme.matchAll(fence)) {
  if (m[1] === undefined) blocks.push(m[2]);
}
const bin = (name) => join(wasmDir, "node_modules", ".bin", name);
const runtimes = {
  node: (file) => ["node", [file]],
  deno: (file) => [bin("deno"), ["run", "--quiet", "--allow-read", "--allow-env", file]],
  bun: (file) => [bin("bun"), ["run", file]],
};

test("the README has runnable examples", () => {
  assert.ok(blocks.length >= 4, `found ${blocks.length} blocks`);
});

blocks.forEach((code, i) => {
  const file = join(scratch, `block-${i + 1}.mjs`);
  writeFileSync(file, code);
  const firstLine = code.split("\n").find((l) => l.startsWith("//") || l.includes("idemkit")) ?? "";
  // better-sqlite3 is a Node addon; Bun and Deno have their own SQLite.
  const where = code.includes("better-sqlite3") ? ["node"] : Object.keys(runtimes);
  for (const runtime of where) {
    test(`README block ${i + 1} in ${runtime}: ${firstLine.slice(0, 60)}`, () => {
      const [cmd, args] = runtimes[runtime](file);
      const result = spawnSync(cmd, args, { cwd: wasmDir, encoding: "utf8", timeout: 60_000 });
      assert.equal(result.status, 0, `${runtime} exited ${result.status}\n${result.stdout}\n${result.stderr}`);
    });
  }
});
