// The README's JavaScript examples run as tests, in Node, Deno and Bun: every ```js
// block except those preceded by `<!-- not run: reason -->` (platform snippets whose
// behaviour the Workers and Deno suites cover). The repository README's JavaScript
// quick start runs too: its Node handler in Node, its Worker in workerd (Miniflare)
// with a D1 database, each sent a request and its retry.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { miniflare } from "../workerd/miniflare.js";

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

/** The ```js blocks of the repository README's section headed `## ${heading}`. */
function quickStartBlocks(heading) {
  const top = readFileSync(join(wasmDir, "..", "README.md"), "utf8");
  const start = top.indexOf(`## ${heading}\n`);
  assert.notEqual(start, -1, `README.md has no section "${heading}"`);
  const end = top.indexOf("\n## ", start + 3);
  const section = top.slice(start, end === -1 ? undefined : end);
  return [...section.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
}

const quickStart = quickStartBlocks("JavaScript: a fetch handler");
const nodeQuickStart = quickStart.filter((code) => !code.includes("export default"));
const workerQuickStart = quickStart.filter((code) => code.includes("export default"));

test("README.md quick start in Node: the handler answers a retry with the stored response", () => {
  assert.equal(nodeQuickStart.length, 1, "one Node block in the JavaScript quick start");
  // Its SQLite file goes to a directory of its own; `idemkit` resolves from the file's place.
  const cwd = join(scratch, "quick-start-node");
  mkdirSync(cwd, { recursive: true });
  const file = join(scratch, "quick-start-node.mjs");
  writeFileSync(file, nodeQuickStart[0]);
  const result = spawnSync("node", [file], { cwd, encoding: "utf8", timeout: 60_000 });
  assert.equal(result.status, 0, `node exited ${result.status}\n${result.stdout}\n${result.stderr}`);
});

test("README.md quick start in workerd over D1: the Worker answers a retry with the stored response", async () => {
  assert.equal(workerQuickStart.length, 1, "one Worker block in the JavaScript quick start");
  const file = join(scratch, "quick-start-worker.mjs");
  writeFileSync(file, workerQuickStart[0]);
  const worker = miniflare([file], { d1Databases: ["DB"] });
  try {
    const order = () =>
      worker.dispatchFetch("http://worker/orders", {
        method: "POST",
        headers: { "idempotency-key": "order-7f3a", "x-tenant-id": "acme", "content-type": "application/json" },
        body: JSON.stringify({ sku: "kettle" }),
      });
    const first = await order();
    const firstBody = await first.text();
    const retry = await order();
    const retryBody = await retry.text();
    assert.equal(first.status, 201, firstBody);
    assert.equal(first.headers.get("idempotent-replayed"), null);
    assert.equal(retry.status, 201, retryBody);
    assert.equal(retry.headers.get("idempotent-replayed"), "true");
    assert.equal(retryBody, firstBody, "the stored body, not a second order");
  } finally {
    await worker.dispose();
  }
});
