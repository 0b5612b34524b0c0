// Runs every JavaScript test of the package: `npm --prefix wasm test` (after the build).
//
//   node --test      conformance and journal suites (memory, better-sqlite3), byte
//                    identity with the Rust CLI and core, workerd via Miniflare (D1,
//                    Durable Objects, Workers example), the webhook example over HTTP,
//                    callWithRetry against the appointments service, the README
//                    examples (Node, Deno, Bun), and (test/agents) the MCP server
//                    wrapper under the MCP SDKs v1 and v2 in Node and workerd, the agent
//                    tool wrappers under the AI SDK and OpenAI Agents JS
//   deno             conformance and journal suites over Deno KV + 50 concurrent calls
//   bun              conformance and journal suites over bun:sqlite + 50 concurrent calls
//   types            the hand-written index.d.ts against a strict TypeScript usage file
//   bench            a smoke run of bench/overhead.mjs against the peer (bench/smoke.mjs)
//
// Any failure, and any runtime that cannot start, fails the run: nothing is skipped.
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, existsSync, readFileSync, readdirSync, rmSync, symlinkSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const wasmDir = join(dirname(fileURLToPath(import.meta.url)), "..");
if (!existsSync(join(wasmDir, "pkg", "package.json")) || !existsSync(join(wasmDir, "node_modules", "idemkit"))) {
  console.error("wasm/pkg is missing: run `npm --prefix wasm run build` first");
  process.exit(1);
}
const bin = (name) => join(wasmDir, "node_modules", ".bin", name);

// The MCP SDKs, the AI SDK (with @ai-sdk/mcp), OpenAI Agents JS and esbuild, pinned in
// test/agents/package-lock.json: installed (about 15 s) only when the lockfile changed
// since the last install. The examples import them as an application would, so
// examples/node_modules points at test/agents/node_modules.
const agents = join(wasmDir, "test", "agents");
const installedLock = join(agents, "node_modules", ".idemkit-installed-lock");
const lock = readFileSync(join(agents, "package-lock.json"));
if (!existsSync(installedLock) || !lock.equals(readFileSync(installedLock))) {
  execFileSync("npm", ["ci", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: agents, stdio: "inherit" });
  copyFileSync(join(agents, "package-lock.json"), installedLock);
}
const examplesModules = join(wasmDir, "examples", "node_modules");
rmSync(examplesModules, { recursive: true, force: true });
symlinkSync("../test/agents/node_modules", examplesModules, "dir");

const testsIn = (dir) => readdirSync(join(wasmDir, "test", dir)).filter((f) => f.endsWith(".test.mjs")).sort().map((f) => join("test", dir, f));
const nodeTests = [...testsIn("node"), ...testsIn("agents")];

const suites = [
  ["types", bin("tsc"), ["-p", "test/types"]],
  ["node", process.execPath, ["--test", "--test-reporter=spec", "--test-concurrency=1", ...nodeTests]],
  ["deno", bin("deno"), ["run", "--unstable-kv", "--allow-read", "--allow-write", "--allow-env", "test/deno/run.js"]],
  ["bun", bin("bun"), ["run", "test/bun/run.js"]],
  ["bench", process.execPath, ["bench/smoke.mjs"]],
];

const summary = [];
let failed = false;
for (const [name, cmd, args] of suites) {
  const started = Date.now();
  console.log(`\n--- ${name}: ${cmd} ${args.join(" ")}`);
  const result = spawnSync(cmd, args, { cwd: wasmDir, stdio: "inherit" });
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  const ok = result.status === 0;
  if (!ok) failed = true;
  summary.push(`${name}: ${ok ? "passed" : `FAILED (exit ${result.status ?? result.error?.message})`} in ${secs} s`);
}
console.log(`\n${summary.join("\n")}`);
process.exit(failed ? 1 : 0);
