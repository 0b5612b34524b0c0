// A real error of the adapter's own database on one request, then the cause gone:
// the request it hit is 503 (nothing executed), and the next requests on the same
// handler are served as if nothing happened. An adapter error is never sticky:
// the adapters hold no state between calls but the database's.
import { assert } from "./harness.js";

/**
 * @param {typeof import("idemkit")} idemkit
 * @param {string} label the adapter, in the case's name
 * @param {() => Promise<{ adapter: import("idemkit").Adapter, fail: () => Promise<void> | void, mend: () => Promise<void> | void }>} make
 *   a fresh adapter, and how to make its database fail and work again
 * @returns {[string, () => Promise<void>][]}
 */
export function storageFaultCases(idemkit, label, make) {
  return [[`${label}: a database error on one request is 503, the next requests are served`, async () => {
    const { adapter, fail, mend } = await make();
    const idem = idemkit.createIdempotency({ adapter, operation: "orders.create", effect: "external", tenant: () => "acme" });
    let runs = 0;
    const handler = async () => {
      runs++;
      return Response.json({ order: runs }, { status: 201 });
    };
    const post = (key) =>
      idem.handle(new Request("https://api.test/orders", { method: "POST", headers: { "content-type": "application/json", "idempotency-key": key }, body: "{}" }), handler);
    assert.equal((await post("before")).status, 201);
    await fail();
    const during = await post("during");
    assert.equal(during.status, 503, "the request the error hit");
    assert.equal(runs, 1, "nothing executed without a claim");
    await mend();
    assert.equal((await post("after")).status, 201, "the next request");
    assert.equal((await post("during")).status, 201, "the key the error hit, never claimed, runs now");
    assert.equal((await post("before")).headers.get("idempotent-replayed"), "true");
    assert.equal(runs, 3, "each key executed once");
  }]];
}

/** SQLite (better-sqlite3 or bun:sqlite): the connection refuses writes for a moment (`PRAGMA query_only`), as a read-only remount would. */
export function sqliteFault(idemkit, db) {
  return {
    adapter: idemkit.sqliteAdapter(db),
    fail: () => db.exec("PRAGMA query_only = 1"),
    mend: () => db.exec("PRAGMA query_only = 0"),
  };
}

/** D1: the records table is missing for a moment (renamed away and back), so every statement fails. */
export function d1Fault(idemkit, db, table) {
  return {
    adapter: idemkit.d1Adapter(db, { table }),
    fail: () => db.prepare(`ALTER TABLE ${table} RENAME TO ${table}_away`).run(),
    mend: () => db.prepare(`ALTER TABLE ${table}_away RENAME TO ${table}`).run(),
  };
}
