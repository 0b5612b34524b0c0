// Smoke runs of overhead.mjs and mcp-wrapper.mjs, so the benchmarks cannot rot: run by
// `npm --prefix wasm test` (scripts/test.mjs). Installs what they need
// (wasm/bench/package-lock.json, a few seconds) when it is missing, runs each with a
// tiny BENCH_SECONDS and checks that it prints one JSON document whose every figure is
// a positive number. No time is asserted.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const benchDir = dirname(fileURLToPath(import.meta.url));
const needed = [["@node-idempotency", "core"], ["@modelcontextprotocol", "server"]];
if (!needed.every((path) => existsSync(join(benchDir, "node_modules", ...path, "package.json")))) {
  execFileSync("npm", ["ci", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: benchDir, stdio: "inherit" });
}
const out = execFileSync(process.execPath, [join(benchDir, "overhead.mjs")], {
  env: { ...process.env, BENCH_SECONDS: "0.005", BENCH_ROUNDS: "2" },
  encoding: "utf8",
});
const doc = JSON.parse(out);
assert.equal(doc.figure, "npm_overhead");
assert.equal(doc.body_bytes, 750);
assert.equal(doc.peer.version, "1.0.11");
const names = ["peer_fresh", "peer_replay", "idemkit_claim_complete", "idemkit_replay", "idemkit_fingerprint",
  "idemkit_decode", "bare_handler", "handle_fresh", "handle_replay", "fetch_copies"];
assert.deepEqual(Object.keys(doc.results).sort(), [...names].sort());
assert.equal(doc.rounds, 2);
for (const name of names) {
  assert.equal(doc.results[name].rounds.length, 2, `${name}: one measurement per round`);
  for (const field of ["mean_us", "p50_us", "ops_per_s", "cpu_us", "iterations"]) {
    const value = doc.results[name][field];
    assert.ok(typeof value === "number" && Number.isFinite(value) && value > 0, `${name}.${field} = ${value}`);
  }
}
for (const name of ["ratio_fresh", "ratio_replay"]) {
  assert.ok(Number.isFinite(doc.derived[name]) && doc.derived[name] > 0, `${name} = ${doc.derived[name]}`);
}
// An added time is a difference of two means (per round, then their median): finite, but its sign is not a property of the code.
for (const name of ["handle_fresh_added_us", "handle_replay_added_us", "handle_fresh_own_us"]) assert.ok(Number.isFinite(doc.derived[name]), name);
console.log(`bench smoke: ${names.length} figures, ratios ${doc.derived.ratio_fresh} / ${doc.derived.ratio_replay}`);

const wrapper = JSON.parse(
  execFileSync(process.execPath, [join(benchDir, "mcp-wrapper.mjs")], { env: { ...process.env, BENCH_SECONDS: "0.005" }, encoding: "utf8" }),
);
assert.equal(wrapper.figure, "npm_mcp_wrapper");
const wrapperNames = ["mcp_bare", "mcp_fresh_memory", "mcp_replay_memory", "mcp_fresh_sqlite", "mcp_replay_sqlite",
  "agent_bare", "agent_fresh_memory", "agent_bare_twice", "agent_retried_memory"];
assert.deepEqual(Object.keys(wrapper.results).sort(), [...wrapperNames].sort());
for (const name of wrapperNames) {
  for (const field of ["mean_us", "p50_us", "p99_us", "ops_per_s", "cpu_us", "iterations"]) {
    const value = wrapper.results[name][field];
    assert.ok(typeof value === "number" && Number.isFinite(value) && value > 0, `${name}.${field} = ${value}`);
  }
}
for (const [name, value] of Object.entries(wrapper.derived)) assert.ok(Number.isFinite(value), name);
console.log(`bench smoke: ${wrapperNames.length} wrapper figures`);
