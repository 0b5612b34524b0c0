// GC over a SQLite table created before the adapter kept GC due times: the
// previous `CREATE TABLE` (id, record, version) and rows written by the previous
// adapter (three statements, no due time) — records in every state and a journal
// entry sharing the table. Opening it with the current sqliteAdapter adds
// `gc_due_at` (DEFAULT 0, so every old row is due at once); the first GC pass
// decodes each old row and deletes, prunes or indexes it as core says, and takes
// what is not a record (the journal entry) out of the index. Running and Unknown
// records survive it, as every later pass.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import * as idemkit from "idemkit";

const dir = mkdtempSync(join(tmpdir(), "idemkit-gc-upgrade-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const T0 = 1_700_000_000_000;
const SECOND = 1000;
const POLICY = { replayWindowMs: 60 * SECOND, recordWindowMs: 120 * SECOND };

/** The sqliteAdapter of the release before GC, statement for statement. */
function previousAdapter(db) {
  db.exec("CREATE TABLE IF NOT EXISTS idemkit_records (id TEXT PRIMARY KEY NOT NULL, record BLOB NOT NULL, version INTEGER NOT NULL) WITHOUT ROWID");
  const select = db.prepare("SELECT record, version FROM idemkit_records WHERE id = ?");
  const insert = db.prepare("INSERT INTO idemkit_records (id, record, version) VALUES (?, ?, 1) ON CONFLICT (id) DO NOTHING");
  const update = db.prepare("UPDATE idemkit_records SET record = ?, version = version + 1 WHERE id = ? AND version = ?");
  return {
    async get(id) {
      const row = select.get(id);
      return row === undefined ? null : { record: new Uint8Array(row.record), version: Number(row.version) };
    },
    async insert(id, record) {
      return insert.run(id, record).changes === 1 ? { version: 1 } : null;
    },
    async update(id, record, version) {
      return update.run(record, id, version).changes === 1 ? { version: version + 1 } : null;
    },
  };
}

const idempotency = (adapter, clock) =>
  idemkit.createIdempotency({ adapter, operation: "orders.create", effect: "external", tenant: () => "acme", clock: () => clock.now, policy: POLICY });
const claimOf = (key) => ({ tenant: "acme", key, body: '{"sku":"kettle"}' });

test("an old-schema SQLite file opens with gc_due_at added, and the first GC pass collects what it wrote", async () => {
  const path = join(dir, "old.db");
  const clock = { now: T0 };
  {
    const db = new Database(path);
    db.pragma("journal_mode = WAL");
    const old = idempotency(previousAdapter(db), clock);
    for (let i = 0; i < 3; i++) {
      const held = await old.claim(claimOf(`old-${i}`));
      await old.complete(held, { status: 201, body: `order ${i}`, resourceRef: `/orders/${i}` });
    }
    await old.markUnknown(await old.claim(claimOf("unknown")), "timeout");
    await old.claim(claimOf("running"));
    clock.now = T0 + 100 * SECOND;
    for (const key of ["recent-0", "recent-1"]) {
      await old.complete(await old.claim(claimOf(key)), { status: 201, body: key, resourceRef: `/orders/${key}` });
    }
    await idemkit.createJournal({ adapter: previousAdapter(db) }).begin("run-1/step-1", { sku: "kettle" });
    assert.equal(db.prepare("SELECT COUNT(*) AS n FROM idemkit_records").get().n, 8);
    db.close();
  }

  const db = new Database(path);
  const adapter = idemkit.sqliteAdapter(db);
  const columns = db.prepare("PRAGMA table_info(idemkit_records)").all().map((c) => c.name);
  assert.deepEqual(columns, ["id", "record", "version", "gc_due_at"]);
  assert.equal(db.prepare("SELECT COUNT(*) AS n FROM idemkit_records WHERE gc_due_at = 0").get().n, 8, "every old row due at once");
  // Opening it again (another process, a restart) changes nothing.
  idemkit.sqliteAdapter(new Database(path));
  const idem = idempotency(adapter, clock);

  clock.now = T0 + 130 * SECOND;
  const first = await idem.gc({ maxBatch: 5 });
  const second = await idem.gc({ maxBatch: 5 });
  const third = await idem.gc({ maxBatch: 5 });
  console.log(`old-schema GC passes: ${JSON.stringify([first, second, third].map(({ next, ...r }) => r))}`);
  assert.equal(first.more, true);
  assert.equal(second.more, false);
  assert.equal(first.deleted + second.deleted, 3, "the three past their record window");
  assert.equal(first.reindexed + second.reindexed, 4, "two recent, one unknown, one running: indexed as core says");
  assert.equal(first.undecodable + second.undecodable, 1, "the journal entry is not a record");
  assert.deepEqual({ ...third, next: null }, { pruned: 0, deleted: 0, reindexed: 0, skipped: 0, undecodable: 0, more: false, next: null });
  assert.equal(db.prepare("SELECT COUNT(*) AS n FROM idemkit_records WHERE gc_due_at = 0").get().n, 0);
  for (let i = 0; i < 3; i++) assert.equal(await idem.inspect(claimOf(`old-${i}`)), null);
  assert.equal((await idem.inspect(claimOf("unknown"))).state, "unknown");
  assert.equal((await idem.inspect(claimOf("running"))).state, "running");
  const journal = await idemkit.createJournal({ adapter }).begin("run-1/step-1", { sku: "kettle" });
  assert.equal(journal.resumed, true, "the journal entry is untouched");

  // The recent records' replay window ends at T0 + 160 s: pruned, then answered 410.
  clock.now = T0 + 161 * SECOND;
  const pruned = await idem.gc();
  assert.equal(`${pruned.pruned}/${pruned.deleted}`, "2/0");
  const retry = await idem.handle(
    new Request("https://shop.test/orders", { method: "POST", headers: { "idempotency-key": "recent-0", "content-type": "application/json" }, body: '{"sku":"kettle"}' }),
    () => assert.fail("never executed again"),
  );
  // A record claimed without a request line compares by body only.
  assert.equal(retry.status, 410);
  assert.equal((await retry.json()).resource_ref, "/orders/recent-0");
  clock.now = T0 + 10 * 365 * 24 * 3600 * SECOND;
  const late = await idem.gc();
  assert.equal(`${late.deleted}/${late.pruned}`, "2/0");
  assert.equal((await idem.inspect(claimOf("unknown"))).state, "unknown", "years later, still there");
  assert.equal((await idem.inspect(claimOf("running"))).state, "running");
  assert.equal(db.prepare("SELECT COUNT(*) AS n FROM idemkit_records").get().n, 4, "unknown, running, the journal entry, the token floor");
  // GC raised the token floor above every deleted record's last token, and kept it out of its index.
  assert.deepEqual(
    db.prepare("SELECT record, gc_due_at FROM idemkit_records WHERE id = 'idemkit:token-floor'").all().map((r) => [Buffer.from(r.record).toString(), r.gc_due_at]),
    [["1", null]],
  );
});

test("the SQLite adapter's scan walks the gc_due_at index in its order, without sorting", () => {
  const db = new Database(":memory:");
  const prepared = [];
  const recording = { exec: (sql) => db.exec(sql), prepare: (sql) => (prepared.push(sql), db.prepare(sql)) };
  idemkit.sqliteAdapter(recording);
  const scan = prepared.find((sql) => sql.includes("ORDER BY gc_due_at"));
  const plan = db.prepare(`EXPLAIN QUERY PLAN ${scan}`).all(1, -1, "", 10).map((row) => row.detail).join("; ");
  assert.match(plan, /USING INDEX idemkit_records_gc_due/, plan);
  assert.doesNotMatch(plan, /TEMP B-TREE/, plan);
});
