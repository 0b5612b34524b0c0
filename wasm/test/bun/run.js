// Bun: the conformance suite over bun:sqlite (and the memory adapter), the
// local-transaction cases over bun:sqlite, retries that wait (polling bun:sqlite), then
// 50 concurrent handle calls on one bun:sqlite database file.
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as idemkit from "idemkit";
import { assert, run } from "../harness.js";
import { conformanceCases } from "../conformance.js";
import { journalCases } from "../journal.js";
import { checkConcurrency, concurrentHandles, waitingRetries } from "../concurrency.js";
import { localTransactionCases, sqliteOrders } from "../local-transactions.js";
import { sqliteFault, storageFaultCases } from "../storage-faults.js";

const started = Date.now();
const dir = mkdtempSync(join(tmpdir(), "idemkit-bun-"));
let files = 0;

const cases = [
  ...conformanceCases(idemkit, () => idemkit.memoryAdapter()).map(([n, f]) => [`memory: ${n}`, f]),
  ...conformanceCases(idemkit, () => idemkit.sqliteAdapter(new Database(":memory:"))).map(([n, f]) => [`bun:sqlite: ${n}`, f]),
  ...conformanceCases(idemkit, () => idemkit.sqliteAdapter(new Database(join(dir, `c${files++}.db`)))).map(([n, f]) => [`bun:sqlite file: ${n}`, f]),
  ...journalCases(idemkit, () => idemkit.sqliteAdapter(new Database(join(dir, `j${files++}.db`)), { table: "idemkit_journal" })).map(([n, f]) => [`bun:sqlite file: ${n}`, f]),
  ...localTransactionCases(idemkit, () => sqliteOrders(idemkit, new Database(":memory:"))).map(([n, f]) => [`bun:sqlite: ${n}`, f]),
  ...localTransactionCases(idemkit, () => sqliteOrders(idemkit, new Database(join(dir, `l${files++}.db`)))).map(([n, f]) => [`bun:sqlite file: ${n}`, f]),
  ...storageFaultCases(idemkit, "bun:sqlite file", async () => sqliteFault(idemkit, new Database(join(dir, `f${files++}.db`)))),
  ["bun:sqlite: the adapter sets a busy timeout (bun's default is none) and runs WAL with synchronous=FULL", async () => {
    const db = new Database(join(dir, "durable.db"));
    const value = (name) => Object.values(db.prepare(`PRAGMA ${name}`).get())[0];
    assert.equal(value("busy_timeout"), 0, "bun:sqlite's default");
    db.exec("PRAGMA journal_mode = WAL");
    db.exec("PRAGMA synchronous = NORMAL");
    idemkit.sqliteAdapter(db);
    assert.equal(value("busy_timeout"), 5000);
    assert.equal(value("journal_mode"), "wal");
    assert.equal(value("synchronous"), 2, "FULL");
    db.close();
    // bun:sqlite's defensive mode already refuses journal_mode=OFF; MEMORY it takes.
    const off = new Database(join(dir, "nojournal.db"));
    off.exec("PRAGMA journal_mode = MEMORY");
    assert.equal(Object.values(off.prepare("PRAGMA journal_mode").get())[0], "memory");
    let refused = null;
    try {
      idemkit.sqliteAdapter(off);
    } catch (err) {
      refused = err;
    }
    assert.ok(refused instanceof TypeError && /journal_mode=memory/.test(refused.message), `refused: ${refused}`);
    off.close();
  }],
  ["bun:sqlite: retries that wait poll the record and are answered with the replay", async () => {
    const result = await waitingRetries(idemkit, idemkit.sqliteAdapter(new Database(join(dir, "wait.db"))));
    console.log(`bun:sqlite waiting: ${JSON.stringify(result)}`);
  }],
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
