// Runs the shared conformance suite inside workerd: over D1 in the Worker, and over
// a Durable Object's storage inside the object. The local-transaction cases run the
// same way, with order rows in a D1 table (bound statements in the adapter's batch)
// and in the object's storage (written through the adapter's transaction).
import * as idemkit from "idemkit";
import { run } from "../harness.js";
import { conformanceCases } from "../conformance.js";
import { journalCases } from "../journal.js";
import { legacyRowsAreCollected } from "../gc-legacy.js";
import { localTransactionCases } from "../local-transactions.js";
import { d1Fault, storageFaultCases } from "../storage-faults.js";

let tables = 0;

// A handler slow enough (a timer, which opens a Durable Object's input gate) that
// the 50 racing requests overlap it; it counts its executions in the store itself.
function slowHandler(count) {
  return async (request) => {
    await count();
    const { sku } = await request.json();
    await new Promise((resolve) => setTimeout(resolve, 50));
    return Response.json({ order: "o-1", sku }, { status: 201 });
  };
}

/** Orders in their own D1 table, inserted by statements the adapter batches with its compare-and-set. */
async function d1Orders(db, n) {
  const table = `orders_${n}`;
  await db.prepare(`CREATE TABLE ${table} (id TEXT PRIMARY KEY NOT NULL)`).run();
  return {
    adapter: idemkit.d1Adapter(db, { table: `local_records_${n}` }),
    insertOrders: (ids) => ids.map((id) => db.prepare(`INSERT INTO ${table} (id) VALUES (?)`).bind(id)),
    orders: async () => (await db.prepare(`SELECT id FROM ${table} ORDER BY id`).all()).results.map((row) => row.id),
    inserted: (results) => results.reduce((sum, result) => sum + result.meta.changes, 0),
  };
}

/** Orders under their own prefix of a Durable Object's storage, put through the adapter's transaction. */
function durableObjectOrders(storage, n) {
  const prefix = `orders${n}:`;
  return {
    adapter: idemkit.durableObjectAdapter(storage, { prefix: `local${n}:` }),
    insertOrders: (ids) => async (txn) => {
      for (const id of ids) {
        if ((await txn.get(prefix + id)) !== undefined) throw new Error(`order ${id} exists`);
        await txn.put(prefix + id, { id });
      }
      return ids.length;
    },
    orders: async () => [...(await storage.list({ prefix })).keys()].map((key) => key.slice(prefix.length)),
    inserted: (n) => n,
  };
}

const raceOptions = (adapter) => ({ adapter, operation: "orders.create", effect: "external", tenant: () => "acme" });

/**
 * Retries that wait (`Prefer: wait`) inside a Durable Object: `adapter` with its
 * reads counted, and a 2 s handler that opens a 1 s window in its middle, when every
 * waiter already waits. A waiter that polled would read the record in the window;
 * one woken by the completion reads nothing until then.
 */
function waitingInObject(storage) {
  const inner = idemkit.durableObjectAdapter(storage, { prefix: "wait:" });
  const stats = { reads: 0, readsInWindow: null, waitingInWindow: null, executions: 0 };
  const adapter = { ...inner, get: (id) => (stats.reads++, inner.get(id)) };
  const idem = idemkit.createIdempotency(raceOptions(adapter));
  const handler = async (request) => {
    stats.executions++;
    const { sku } = await request.json();
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const before = stats.reads;
    stats.waitingInWindow = idem.waiting();
    await new Promise((resolve) => setTimeout(resolve, 1000));
    stats.readsInWindow = stats.reads - before;
    return Response.json({ order: "o-1", sku }, { status: 201 });
  };
  return { stats, handle: (request) => idem.handle(request, handler) };
}

/**
 * A D1 table created by the previous d1Schema (no gc_due_at), written by the
 * previous adapter's statements: 4 completed records (3 past their record window
 * when GC runs) and 1 Unknown. The current d1Adapter adds the column; GC collects.
 */
async function d1Upgrade(db) {
  const table = "legacy_records";
  await db.prepare(`CREATE TABLE ${table} (id TEXT PRIMARY KEY NOT NULL, record BLOB NOT NULL, version INTEGER NOT NULL) WITHOUT ROWID`).run();
  const previous = {
    async get(id) {
      const row = await db.prepare(`SELECT record, version FROM ${table} WHERE id = ?`).bind(id).first();
      return row === null ? null : { record: new Uint8Array(row.record), version: row.version };
    },
    async insert(id, record) {
      const r = await db.prepare(`INSERT INTO ${table} (id, record, version) VALUES (?, ?, 1) ON CONFLICT (id) DO NOTHING`).bind(id, record).run();
      return r.meta.changes === 1 ? { version: 1 } : null;
    },
    async update(id, record, version) {
      const r = await db.prepare(`UPDATE ${table} SET record = ?, version = version + 1 WHERE id = ? AND version = ?`).bind(record, id, version).run();
      return r.meta.changes === 1 ? { version: version + 1 } : null;
    },
  };
  const clock = { now: 1_700_000_000_000 };
  const options = (adapter) => ({ adapter, operation: "orders.create", effect: "external", tenant: () => "acme", clock: () => clock.now, policy: { replayWindowMs: 60_000, recordWindowMs: 120_000 } });
  const old = idemkit.createIdempotency(options(previous));
  const claim = (key) => ({ tenant: "acme", key, body: "{}" });
  for (const key of ["a", "b", "c"]) await old.complete(await old.claim(claim(key)), { status: 201, body: key });
  await old.markUnknown(await old.claim(claim("u")), "timeout");
  clock.now += 100_000;
  await old.complete(await old.claim(claim("recent")), { status: 201, body: "recent" });
  clock.now += 30_000;
  const idem = idemkit.createIdempotency(options(idemkit.d1Adapter(db, { table })));
  const passes = [await idem.gc({ maxBatch: 2 }), await idem.gc({ maxBatch: 2 }), await idem.gc({ maxBatch: 2 })];
  const columns = (await db.prepare(`PRAGMA table_info(${table})`).all()).results.map((c) => c.name);
  const states = {};
  for (const key of ["a", "b", "c", "u", "recent"]) states[key] = (await idem.inspect(claim(key)))?.state ?? null;
  return { columns, passes: passes.map(({ next, ...report }) => report), states };
}

/**
 * The migration statements, run as a migration file would be (`DB.exec`), with
 * adapters that create nothing: d1Schema for a new table, d1Upgrade for an old one.
 */
async function d1Migrations(db) {
  const oldRow = async (adapter) => {
    const clock = { now: 1_700_000_000_000 };
    const idem = idemkit.createIdempotency({ adapter, operation: "o", effect: "local", tenant: () => "t", clock: () => clock.now, policy: { replayWindowMs: 1000, recordWindowMs: 2000 } });
    await idem.complete(await idem.claim({ tenant: "t", key: "k", body: "{}" }), { status: 201, body: "x" });
    clock.now += 5000;
    return idem;
  };
  await db.exec(idemkit.d1Schema("migrated_new"));
  const fresh = await oldRow(idemkit.d1Adapter(db, { table: "migrated_new", createTable: false }));
  const freshReport = await fresh.gc();
  await db.exec("CREATE TABLE migrated_old (id TEXT PRIMARY KEY NOT NULL, record BLOB NOT NULL, version INTEGER NOT NULL) WITHOUT ROWID");
  // A row the previous adapter wrote: no due time.
  const scratch = idemkit.memoryAdapter();
  await oldRow(scratch);
  const id = idemkit.recordId("t", "o", "k");
  await db.prepare("INSERT INTO migrated_old (id, record, version) VALUES (?, ?, 1)").bind(id, (await scratch.get(id)).record).run();
  await db.exec(idemkit.d1Upgrade("migrated_old"));
  const upgraded = idemkit.createIdempotency({ adapter: idemkit.d1Adapter(db, { table: "migrated_old", createTable: false }), operation: "o", effect: "local", tenant: () => "t", clock: () => 1_700_000_005_000 });
  const upgradedReport = await upgraded.gc();
  const indexes = async (table) => (await db.prepare(`PRAGMA index_list(${table})`).all()).results.map((i) => i.name).filter((n) => n.includes("gc"));
  return { fresh: freshReport.deleted, upgraded: upgradedReport.deleted, indexes: [...(await indexes("migrated_new")), ...(await indexes("migrated_old"))] };
}

export default {
  async fetch(request, env) {
    const { pathname } = new URL(request.url);
    if (pathname === "/conformance/d1") {
      const make = () => idemkit.d1Adapter(env.DB, { table: `records_${tables++}` });
      const cases = [
        ...conformanceCases(idemkit, make),
        ...journalCases(idemkit, make),
        ...storageFaultCases(idemkit, "D1", async () => d1Fault(idemkit, env.DB, `fault_${tables++}`)),
      ];
      return Response.json(await run(cases));
    }
    if (pathname === "/local/d1") {
      return Response.json(await run(localTransactionCases(idemkit, () => d1Orders(env.DB, tables++))));
    }
    if (pathname === "/conformance/do" || pathname === "/local/do" || pathname.startsWith("/race/do") || pathname.startsWith("/wait/do") || pathname === "/gc/do-legacy") {
      return env.SUITE.get(env.SUITE.idFromName("suite")).fetch(request);
    }
    if (pathname === "/race/d1") {
      await env.DB.prepare("CREATE TABLE IF NOT EXISTS executions (n INTEGER)").run();
      const idem = idemkit.createIdempotency(raceOptions(idemkit.d1Adapter(env.DB, { table: "race_records" })));
      return idem.handle(request, slowHandler(() => env.DB.prepare("INSERT INTO executions VALUES (1)").run()));
    }
    if (pathname === "/gc/d1-upgrade") return Response.json(await d1Upgrade(env.DB));
    if (pathname === "/gc/d1-migrations") return Response.json(await d1Migrations(env.DB));
    if (pathname === "/race/d1/executions") {
      return Response.json(await env.DB.prepare("SELECT COUNT(*) AS n FROM executions").first());
    }
    return new Response("not found", { status: 404 });
  },
};

export class Suite {
  constructor(ctx) {
    this.storage = ctx.storage;
    this.prefixes = 0;
  }

  async fetch(request) {
    const { pathname } = new URL(request.url);
    if (pathname === "/race/do") {
      this.idem ??= idemkit.createIdempotency(raceOptions(idemkit.durableObjectAdapter(this.storage, { prefix: "race:" })));
      return this.idem.handle(request, slowHandler(async () => this.storage.put("executions", ((await this.storage.get("executions")) ?? 0) + 1)));
    }
    if (pathname === "/wait/do") {
      this.waiting ??= waitingInObject(this.storage);
      return this.waiting.handle(request);
    }
    if (pathname === "/wait/do/stats") return Response.json(this.waiting.stats);
    if (pathname === "/race/do/executions") {
      return Response.json({ n: (await this.storage.get("executions")) ?? 0 });
    }
    if (pathname === "/gc/do-legacy") {
      // The previous adapter's rows: `{ record, version }` under `<prefix><id>`.
      const prefix = "legacy:";
      const total = await legacyRowsAreCollected(idemkit, idemkit.durableObjectAdapter(this.storage, { prefix }), (id, record) =>
        this.storage.put(prefix + id, { record, version: 1 }),
      );
      return Response.json(total);
    }
    if (pathname === "/local/do") {
      return Response.json(await run(localTransactionCases(idemkit, () => durableObjectOrders(this.storage, this.prefixes++))));
    }
    const make = () => idemkit.durableObjectAdapter(this.storage, { prefix: `case${this.prefixes++}:` });
    const cases = [...conformanceCases(idemkit, make), ...journalCases(idemkit, make)];
    return Response.json(await run(cases));
  }
}
