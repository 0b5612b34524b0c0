// Exactly once for local effects, in Node: the shared cases (test/local-transactions.js)
// over the memory adapter and better-sqlite3 (in memory and on a file), the refusal
// over an adapter without updateWith, and what only Node can show here:
// - a worker killed inside completeWith's transaction leaves neither the order nor
//   the completion, and the retry after its lease commits both once;
// - a worker killed between its own order write and a plain `complete` leaves the
//   order without its outcome, and the retry writes a second one (at least once);
// - the loop never drops local writes a decision cannot carry;
// - a SQLite `local` that returns a promise is refused and rolled back.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import * as idemkit from "idemkit";
import { readDecideWrite } from "../../pkg/adapters/loop.js";
import { localTransactionCases, localUnsupportedCases, memoryOrders, ordersWithout, sqliteOrders } from "../local-transactions.js";

const dir = mkdtempSync(join(tmpdir(), "idemkit-local-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
let files = 0;

const stores = {
  memory: () => memoryOrders(idemkit),
  "better-sqlite3 :memory:": () => sqliteOrders(idemkit, new Database(":memory:")),
  "better-sqlite3 file": () => sqliteOrders(idemkit, new Database(join(dir, `l${files++}.db`))),
};
for (const [label, make] of Object.entries(stores)) {
  for (const [name, fn] of localTransactionCases(idemkit, make)) test(`${label}: ${name}`, fn);
}

/** A memory adapter with the seam's five methods only (no name, no updateWith). */
function withoutLocal() {
  const { get, insert, update, delete: remove, scan } = idemkit.memoryAdapter();
  return { get, insert, update, delete: remove, scan };
}
for (const [name, fn] of localUnsupportedCases(idemkit, () => ordersWithout(withoutLocal()))) test(`custom adapter: ${name}`, fn);

const childScript = fileURLToPath(new URL("./local-crash-child.mjs", import.meta.url));

/** A SQLite file with an orders table, and a worker on it killed as `mode` says. */
function crashedWorker(mode) {
  const dbPath = join(dir, `crash-${mode}.db`);
  const setup = new Database(dbPath);
  setup.pragma("journal_mode = WAL");
  setup.exec("CREATE TABLE orders (id TEXT PRIMARY KEY NOT NULL)");
  setup.close();
  const child = spawnSync(process.execPath, [childScript, dbPath, mode], { encoding: "utf8", timeout: 30_000 });
  assert.equal(child.signal, "SIGKILL", `the worker was killed: ${child.stderr}`);
  const db = new Database(dbPath);
  // The retry comes after the dead worker's lease (30 s) ran out.
  const idem = idemkit.createIdempotency({
    adapter: idemkit.sqliteAdapter(db),
    operation: "orders.create",
    effect: "local",
    tenant: () => "acme",
    clock: () => Date.now() + 31_000,
  });
  const orders = () => db.prepare("SELECT id FROM orders ORDER BY id").all().map((row) => row.id);
  return { db, idem, orders };
}

const crashKey = { tenant: "acme", key: "crash-1", body: "{}" };

test("better-sqlite3 file: a worker killed inside completeWith's transaction leaves neither the order nor the completion; the retry commits both once", async () => {
  const { db, idem, orders } = crashedWorker("completeWith");
  assert.deepEqual(orders(), [], "the order rolled back with the completion");
  assert.equal((await idem.inspect(crashKey)).state, "running", "the record was not completed");
  const retry = await idem.claim(crashKey);
  assert.equal(retry.outcome, "execute", "a Local record whose lease ran out is taken over");
  assert.equal(retry.attempt, 2);
  await idem.completeWith(retry, { status: 201, body: "created" }, (conn) => conn.prepare("INSERT INTO orders (id) VALUES (?)").run(`ord_${retry.attempt}`));
  assert.deepEqual(orders(), ["ord_2"], "the effect happened once");
  assert.equal((await idem.claim(crashKey)).outcome, "replay");
  db.close();
});

test("better-sqlite3 file: a worker killed between its own order write and a plain complete leaves the order without its outcome; the retry writes a second one", async () => {
  const { db, idem, orders } = crashedWorker("beforeComplete");
  assert.deepEqual(orders(), ["ord_1"], "the order committed on its own");
  assert.equal((await idem.inspect(crashKey)).state, "running", "its outcome was never recorded");
  const retry = await idem.claim(crashKey);
  assert.equal(retry.outcome, "execute");
  db.prepare("INSERT INTO orders (id) VALUES (?)").run(`ord_${retry.attempt}`);
  await idem.complete(retry, { status: 201, body: "created" });
  assert.deepEqual(orders(), ["ord_1", "ord_2"], "at least once: the effect ran again");
  db.close();
});

test("the loop: local writes a decision cannot carry (insert, delete, nothing to write) throw, and nothing is written", async () => {
  const adapter = idemkit.memoryAdapter();
  const call = (fn) => fn();
  const applied = [];
  const local = () => applied.push("applied");
  const bytes = new Uint8Array([1]);
  // On a synchronous adapter the loop answers synchronously: its refusal is thrown.
  await assert.rejects(async () => readDecideWrite({ adapter, id: "0d01", call, what: "x", local, decide: () => ({ write: bytes }) }), { code: "invalid-argument" });
  assert.equal(await adapter.get("0d01"), null, "not inserted");
  await adapter.insert("0d01", bytes);
  for (const write of ["delete", null]) {
    await assert.rejects(async () => readDecideWrite({ adapter, id: "0d01", call, what: "x", local, decide: () => ({ write }) }), { code: "invalid-argument" });
  }
  assert.notEqual(await adapter.get("0d01"), null, "not deleted");
  const done = await readDecideWrite({ adapter, id: "0d01", call, what: "x", local, decide: () => ({ write: new Uint8Array([2]) }) });
  assert.deepEqual(done.local, { result: 1 }, "an update carries them, and reports their result");
  assert.deepEqual(applied, ["applied"]);
  const plain = await readDecideWrite({ adapter, id: "0d01", call, what: "x", decide: () => ({ write: new Uint8Array([3]) }) });
  assert.equal(plain.local, null, "no local writes given");
});

test("better-sqlite3: a local that returns a promise is refused, and what it wrote before its first await rolls back", async () => {
  const { adapter, orders } = sqliteOrders(idemkit, new Database(":memory:"));
  const idem = idemkit.createIdempotency({ adapter, operation: "orders.create", effect: "local", tenant: () => "acme" });
  const held = await idem.claim(crashKey);
  await assert.rejects(
    idem.completeWith(held, { status: 201 }, async (conn) => {
      conn.prepare("INSERT INTO orders (id) VALUES ('o-async')").run();
    }),
    (err) => err.code === "local-writes-failed" && /synchronous/.test(err.cause.message),
  );
  assert.deepEqual(await orders(), []);
  assert.equal((await idem.inspect(crashKey)).state, "running");
  await assert.rejects(idem.completeWith(held, { status: 201 }, [{ not: "a function" }]), { code: "invalid-argument" });
  await assert.rejects(idem.completeWith(held, { status: 201 }), { code: "invalid-argument" });
});
