// One of several threads that race on one SQLite file, each with its own
// better-sqlite3 connection (as separate processes would). Started by
// conformance.test.mjs; fires its share of the calls when told "go".
import { parentPort, workerData } from "node:worker_threads";
import Database from "better-sqlite3";
import * as idemkit from "idemkit";
import { concurrentHandles } from "../concurrency.js";

const db = new Database(workerData.dbPath, { timeout: 10_000 });
db.pragma("journal_mode = WAL");
const adapter = idemkit.sqliteAdapter(db);
parentPort.once("message", async () => {
  const result = await concurrentHandles(idemkit, adapter, { calls: workerData.calls, key: workerData.key, handlerMs: 50 });
  db.close();
  parentPort.postMessage(result);
});
parentPort.postMessage("ready");
