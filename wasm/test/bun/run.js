// Bun: the conformance suite over bun:sqlite (and the memory adapter), then 50
// concurrent handle calls on one bun:sqlite database file.
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as idemkit from "idemkit";
import { run } from "../harness.js";
import { conformanceCases } from "../conformance.js";
import { journalCases } from "../journal.js";
import { checkConcurrency, concurrentHandles } from "../concurrency.js";

const started = Date.now();
const dir = mkdtempSync(join(tmpdir(), "idemkit-bun-"));
let files = 0;

const cases = [
  ...conformanceCases(idemkit, () => idemkit.memoryAdapter()).map(([n, f]) => [`memory: ${n}`, f]),
  ...conformanceCases(idemkit, () => idemkit.sqliteAdapter(new Database(":memory:"))).map(([n, f]) => [`bun:sqlite: ${n}`, f]),
  ...conformanceCases(idemkit, () => idemkit.sqliteAdapter(new Database(join(dir, `c${files++}.db`)))).map(([n, f]) => [`bun:sqlite file: ${n}`, f]),
  ...journalCases(idemkit, () => idemkit.sqliteAdapter(new Database(join(dir, `j${files++}.db`)), { table: "idemkit_journal" })).map(([n, f]) => [`bun:sqlite file: ${n}`, f]),
  ["bun:sqlite: 50 concurrent handle calls with one key execute once", async () => {
    const result = await concurrentHandles(idemkit, idemkit.sqliteAdapter(new Database(join(dir, "race.db"))));
    console.log(`bun:sqlite: ${JSON.stringify(result)}`);
    checkConcurrency(result);
  }],
];

const { passed, failed } = await run(cases, (line) => console.log(line));
rmSync(dir, { recursive: true, force: true });
console.log(`bun ${Bun.version}: ${((Date.now() - started) / 1000).toFixed(1)} s`);
console.log(`${passed} passed, ${failed} failed`);
if (failed > 0 || passed === 0) process.exit(1);
