// The conformance and journal suites in Node over the memory adapter and better-sqlite3 (in
// memory and on a file), plus 50 concurrent calls on better-sqlite3.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import * as idemkit from "idemkit";
import { conformanceCases } from "../conformance.js";
import { journalCases } from "../journal.js";
import { checkConcurrency, concurrentHandles } from "../concurrency.js";
import { sqliteFault, storageFaultCases } from "../storage-faults.js";

const dir = mkdtempSync(join(tmpdir(), "idemkit-node-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
let files = 0;

const adapters = {
  memory: () => idemkit.memoryAdapter(),
  "better-sqlite3 :memory:": () => idemkit.sqliteAdapter(new Database(":memory:")),
  "better-sqlite3 file": () => idemkit.sqliteAdapter(new Database(join(dir, `c${files++}.db`))),
};

for (const [label, make] of Object.entries(adapters)) {
  for (const [name, fn] of [...conformanceCases(idemkit, make), ...journalCases(idemkit, make)]) {
    test(`${label}: ${name}`, fn);
  }
}

for (const [name, fn] of storageFaultCases(idemkit, "better-sqlite3 file", async () => sqliteFault(idemkit, new Database(join(dir, `f${files++}.db`))))) {
  test(name, fn);
}

test("better-sqlite3: 50 concurrent handle calls with one key execute once", async () => {
  const result = await concurrentHandles(idemkit, idemkit.sqliteAdapter(new Database(join(dir, "race.db"))));
  console.log(`node better-sqlite3: ${JSON.stringify(result)}`);
  checkConcurrency(result);
  assert.equal(result.executions, 1);
});

test("better-sqlite3: 5 threads × 10 calls, each thread its own connection to one file, execute once", async () => {
  const { Worker } = await import("node:worker_threads");
  const dbPath = join(dir, "threads.db");
  const setup = new Database(dbPath);
  setup.pragma("journal_mode = WAL");
  idemkit.sqliteAdapter(setup); // creates the table before the race
  setup.close();
  const threads = Array.from({ length: 5 }, () => new Worker(new URL("./sqlite-thread.mjs", import.meta.url), { workerData: { dbPath, calls: 10, key: "threaded-race" } }));
  await Promise.all(threads.map((w) => new Promise((resolve) => w.once("message", resolve))));
  const started = Date.now();
  const results = await Promise.all(
    threads.map((w) => {
      const done = new Promise((resolve, reject) => {
        w.once("message", resolve);
        w.once("error", reject);
      });
      w.postMessage("go");
      return done;
    }),
  );
  await Promise.all(threads.map((w) => w.terminate()));
  const total = results.reduce(
    (t, r) => ({ calls: t.calls + r.calls, executions: t.executions + r.executions, executed: t.executed + r.executed, replayed: t.replayed + r.replayed, inProgress: t.inProgress + r.inProgress, other: [...t.other, ...r.other] }),
    { calls: 0, executions: 0, executed: 0, replayed: 0, inProgress: 0, other: [] },
  );
  console.log(`node better-sqlite3, 5 threads: ${JSON.stringify({ ...total, ms: Date.now() - started })}`);
  checkConcurrency(total);
});
