// Exactly once for local effects: `completeWith` commits the caller's local writes
// (here: order rows) and the record's completion in one transaction of the
// adapter's store, both or neither. Run unchanged over every adapter with
// `updateWith` (memory, SQLite in Node and Bun, D1 and a Durable Object in
// workerd); over an adapter without it, only the refusal is checked.
// Time is virtual (the `clock` option), so a lease expires exactly when a case says.
import { assert } from "./harness.js";

const T0 = 1_700_000_000_000;
const SECOND = 1000;
const LEASE_MS = 30 * SECOND;

/**
 * The orders of a store, written with its adapter's kind of local writes:
 * `{ adapter, insertOrders(ids) → local writes, orders() → ids written, inserted(result) → rows inserted }`.
 * Inserting an id that exists fails (a primary key), like a constraint violation.
 * @typedef {{ adapter: import("idemkit").Adapter<any, any>, insertOrders(ids: string[]): unknown, orders(): Promise<string[]>, inserted(result: unknown): number }} OrderStore
 */

/**
 * Orders in a SQLite table on the adapter's connection (better-sqlite3 or bun:sqlite).
 * @returns {OrderStore}
 */
export function sqliteOrders(idemkit, db) {
  const adapter = idemkit.sqliteAdapter(db);
  db.exec("CREATE TABLE orders (id TEXT PRIMARY KEY NOT NULL)");
  return {
    adapter,
    insertOrders: (ids) => (conn) => ids.reduce((n, id) => n + conn.prepare("INSERT INTO orders (id) VALUES (?)").run(id).changes, 0),
    orders: async () => db.prepare("SELECT id FROM orders ORDER BY id").all().map((row) => row.id),
    inserted: (changes) => changes,
  };
}

/**
 * Orders in a Set beside the memory adapter; a memory store has no transaction,
 * so the local writes check every id before they add any.
 * @returns {OrderStore}
 */
export function memoryOrders(idemkit) {
  const rows = new Set();
  return {
    adapter: idemkit.memoryAdapter(),
    insertOrders: (ids) => () => {
      ids.forEach((id, i) => {
        if (rows.has(id) || ids.indexOf(id) !== i) throw new Error(`order ${id} exists`);
      });
      for (const id of ids) rows.add(id);
      return ids.length;
    },
    orders: async () => [...rows].sort(),
    inserted: (n) => n,
  };
}

/**
 * An adapter without `updateWith` and local writes that note it if they were ever applied.
 * @returns {OrderStore}
 */
export function ordersWithout(adapter) {
  const rows = [];
  return { adapter, insertOrders: (ids) => () => rows.push(...ids), orders: async () => [...rows].sort(), inserted: (n) => n };
}

/** `adapter` with its compare-and-set writes counted (`update`, `updateWith`). */
function countingWrites(adapter) {
  const counts = { update: 0, updateWith: 0 };
  const counted = (method) => (...args) => {
    counts[method]++;
    return adapter[method](...args);
  };
  const wrapped = { ...adapter, update: counted("update") };
  if (adapter.updateWith !== undefined) wrapped.updateWith = counted("updateWith");
  return { adapter: wrapped, counts };
}

/**
 * The cases for an adapter with `updateWith`.
 * @param {typeof import("idemkit")} idemkit the package as imported in this runtime
 * @param {() => OrderStore | Promise<OrderStore>} makeStore a fresh store per case
 * @returns {[string, () => Promise<void>][]}
 */
export const localTransactionCases = (idemkit, makeStore) => casesOver(idemkit, makeStore).applied;

/** The cases for an adapter without `updateWith` (same arguments). */
export const localUnsupportedCases = (idemkit, makeStore) => casesOver(idemkit, makeStore).refused;

function casesOver(idemkit, makeStore) {
  const text = (bytes) => new TextDecoder().decode(bytes);

  async function setup() {
    const store = await makeStore();
    const clock = { now: T0 };
    const { adapter, counts } = countingWrites(store.adapter);
    const idem = idemkit.createIdempotency({
      adapter,
      operation: "orders.create",
      effect: "local",
      tenant: (request) => request.headers.get("x-tenant"),
      policy: { leaseMs: LEASE_MS },
      clock: () => clock.now,
    });
    return { ...store, adapter, counts, idem, clock };
  }

  const claimInput = (key = "k-1") => ({ tenant: "acme", key, body: '{"sku":"kettle"}' });
  const created = (id) => ({ status: 201, headers: { location: `/orders/${id}` }, body: `{"id":"${id}"}` });
  const request = (key, id) =>
    new Request("https://api.test/orders", {
      method: "POST",
      headers: { "content-type": "application/json", "idempotency-key": key, "x-tenant": "acme" },
      body: JSON.stringify({ id }),
    });
  const headersOf = (response) => [...response.headers].filter(([name]) => name !== "idempotent-replayed");

  /** The record of `held` is exactly as the claim left it: same version, same bytes, still Running. */
  async function unchanged(adapter, idem, held, before) {
    const after = await adapter.get(held.id);
    assert.equal(after.version, before.version, "the record's version");
    assert.bytesEqual(after.record, before.record, "the record's bytes");
    const record = await idem.inspect(claimInput());
    assert.equal(record.state, "running");
    assert.equal(record.lastToken, held.token, "still under this lease");
  }

  const refused = [
    ["an adapter without updateWith: completeWith throws local-unsupported naming it, before anything is written", async () => {
      const { adapter, idem, insertOrders, orders } = await setup();
      const held = await idem.claim(claimInput());
      const before = await adapter.get(held.id);
      const err = await assert.rejects(idem.completeWith(held, created("o-1"), insertOrders(["o-1"])), "local-unsupported");
      assert.ok(err.message.includes(adapter.name ?? "the adapter"), err.message);
      assert.equal((await orders()).length, 0, "the local writes were not applied");
      await unchanged(adapter, idem, held, before);
    }],

    ["an adapter without updateWith: execution.completeWith is refused, and the handler's response is recorded as usual", async () => {
      const { idem, insertOrders, orders } = await setup();
      const handler = async (_request, execution) => {
        const err = await assert.rejects(execution.completeWith(created("o-1"), insertOrders(["o-1"])), "local-unsupported");
        return new Response(err.code, { status: 501 });
      };
      assert.equal((await idem.handle(request("k-1", "o-1"), handler)).status, 501);
      assert.equal((await orders()).length, 0);
      assert.equal((await idem.inspect(claimInput())).state, "released", "a local 5xx is released, as without completeWith");
    }],
  ];

  const applied = [
    ["adapter seam: updateWith applies the local writes only with its compare-and-set", async () => {
      const { adapter, insertOrders, orders, inserted } = await makeStore();
      const v1 = (await adapter.insert("0c01", new Uint8Array([1]), { gcDueAt: null })).version;
      const v2 = (await adapter.update("0c01", new Uint8Array([2]), v1, { gcDueAt: null })).version;
      assert.equal(await adapter.updateWith("0c01", new Uint8Array([9]), v1, { gcDueAt: 10 }, insertOrders(["o-stale"])), null, "a stale version");
      assert.equal(await adapter.updateWith("0c99", new Uint8Array([9]), v1, { gcDueAt: 10 }, insertOrders(["o-absent"])), null, "no record");
      assert.equal((await orders()).length, 0, "a refused compare-and-set applies nothing of the local writes");
      const written = await adapter.updateWith("0c01", new Uint8Array([3]), v2, { gcDueAt: 20 }, insertOrders(["o-1"]));
      assert.ok(written !== null && written.version !== v2, "applied: a new version");
      assert.equal(inserted(written.result), 1, "the local writes' result");
      assert.equal((await orders()).join(), "o-1");
      // "o-2" is inserted, then "o-1" fails: the whole transaction rolls back.
      const err = await assert.rejects(
        adapter.updateWith("0c01", new Uint8Array([4]), written.version, { gcDueAt: 30 }, insertOrders(["o-2", "o-1"])),
        "local-writes-failed",
      );
      assert.ok(err.cause !== undefined, "the caller's error is the cause");
      assert.equal((await orders()).join(), "o-1", "the local writes before the failing one rolled back");
      const read = await adapter.get("0c01");
      assert.equal(read.version, written.version, "the failed call wrote no record");
      assert.bytesEqual(read.record, new Uint8Array([3]));
      const { entries } = await adapter.scan({ gcDueBefore: 100, limit: 10 });
      assert.equal(entries.map((e) => `${e.id}@${e.gcDueAt}`).join(), "0c01@20", "only the applied write moved the GC index");
    }],

    ["completeWith: the order and the completion commit together; a retry replays the stored response", async () => {
      const { idem, clock, insertOrders, orders, inserted } = await setup();
      const held = await idem.claim(claimInput());
      const { record, result } = await idem.completeWith(held, created("o-1"), insertOrders(["o-1"]));
      assert.equal(record.state, "completed");
      assert.equal(record.response.status, 201);
      assert.equal(inserted(result), 1);
      assert.equal((await orders()).join(), "o-1");
      clock.now += 60 * SECOND;
      const retry = await idem.claim(claimInput());
      assert.equal(retry.outcome, "replay");
      assert.equal(text(retry.response.body), '{"id":"o-1"}');
      await assert.rejects(idem.completeWith(held, created("o-9"), insertOrders(["o-9"])), "wrong-state", "completed once");
      assert.equal((await orders()).join(), "o-1");
    }],

    ["completeWith on a lease taken over: refused with stale-token, and the order is not written", async () => {
      const { idem, clock, insertOrders, orders } = await setup();
      const first = await idem.claim(claimInput());
      clock.now += LEASE_MS + SECOND;
      const second = await idem.claim(claimInput());
      assert.equal(second.outcome, "execute");
      assert.equal(second.token, 2n);
      await assert.rejects(idem.completeWith(first, created("o-late"), insertOrders(["o-late"])), "stale-token");
      assert.equal((await orders()).length, 0, "the fenced worker's order was not written");
      assert.equal((await idem.inspect(claimInput())).state, "running");
      await idem.completeWith(second, created("o-2"), insertOrders(["o-2"]));
      assert.equal((await orders()).join(), "o-2");
    }],

    ["completeWith whose local writes fail: nothing is written, and the record stays Running under the lease", async () => {
      const { adapter, idem, insertOrders, orders } = await setup();
      const held = await idem.claim(claimInput());
      const before = await adapter.get(held.id);
      const err = await assert.rejects(idem.completeWith(held, created("o-1"), insertOrders(["o-1", "o-1"])), "local-writes-failed");
      assert.ok(err.cause !== undefined, "the caller's error is the cause");
      assert.equal((await orders()).length, 0, "no order, not even the first insert");
      await unchanged(adapter, idem, held, before);
      // The lease still holds: the worker can complete with other writes.
      await idem.completeWith(held, created("o-1"), insertOrders(["o-1"]));
      assert.equal((await orders()).join(), "o-1");
    }],

    ["handle: a handler that completes with completeWith is answered the stored response, recorded once; a retry replays it byte for byte", async () => {
      const { idem, counts, insertOrders, orders } = await setup();
      let runs = 0;
      const handler = async (req, execution) => {
        runs++;
        const { id } = await req.json();
        const response = Response.json({ id }, { status: 201, headers: { location: `/orders/${id}`, "set-cookie": "session=1" } });
        const { record } = await execution.completeWith(response, insertOrders([id]));
        assert.equal(record.state, "completed");
        // Whatever the handler returns now, the answer is what was recorded.
        return new Response("not recorded", { status: 200 });
      };
      const first = await idem.handle(request("k-1", "o-1"), handler);
      assert.equal(first.status, 201);
      assert.equal(first.headers.get("idempotent-replayed"), null);
      assert.equal(first.headers.get("location"), "/orders/o-1");
      assert.equal(first.headers.get("set-cookie"), null, "only replayable headers, as a replay");
      const firstBody = new Uint8Array(await first.arrayBuffer());
      assert.equal(text(firstBody), '{"id":"o-1"}');
      assert.equal(counts.updateWith, 1, "completed once, by completeWith");
      assert.equal(counts.update, 0, "handle recorded nothing a second time");
      const retry = await idem.handle(request("k-1", "o-1"), handler);
      assert.equal(retry.status, 201);
      assert.equal(retry.headers.get("idempotent-replayed"), "true");
      assert.equal(JSON.stringify(headersOf(retry)), JSON.stringify(headersOf(first)));
      assert.bytesEqual(new Uint8Array(await retry.arrayBuffer()), firstBody);
      assert.equal(runs, 1);
      assert.equal((await orders()).join(), "o-1", "one order");
      assert.equal(counts.updateWith + counts.update, 1);
    }],

    ["handle: a handler that throws after completeWith committed is answered the stored response, never released", async () => {
      const { idem, counts, insertOrders, orders } = await setup();
      const handler = async (_request, execution) => {
        await execution.completeWith(created("o-1"), insertOrders(["o-1"]));
        throw new Error("after the commit");
      };
      const first = await idem.handle(request("k-1", "o-1"), handler);
      assert.equal(first.status, 201);
      assert.equal(await first.text(), '{"id":"o-1"}');
      assert.equal((await idem.inspect(claimInput())).state, "completed");
      const retry = await idem.handle(request("k-1", "o-1"), handler);
      assert.equal(retry.headers.get("idempotent-replayed"), "true");
      assert.equal((await orders()).join(), "o-1");
      assert.equal(counts.update, 0, "neither released nor recorded again");
    }],

    ["handle: when completeWith fails nothing was committed, and the handler's own response is recorded as usual", async () => {
      const { idem, insertOrders, orders } = await setup();
      let runs = 0;
      const handler = async (_request, execution) => {
        runs++;
        const err = await assert.rejects(execution.completeWith(created("o-1"), insertOrders(["o-1", "o-1"])), "local-writes-failed");
        await assert.rejects(execution.completeWith(created("o-1"), insertOrders(["o-1"])), "invalid-argument", "once per execution");
        return Response.json({ error: err.code }, { status: 422 });
      };
      const first = await idem.handle(request("k-1", "o-1"), handler);
      assert.equal(first.status, 422);
      assert.equal((await orders()).length, 0, "no order");
      const retry = await idem.handle(request("k-1", "o-1"), handler);
      assert.equal(retry.status, 422);
      assert.equal(retry.headers.get("idempotent-replayed"), "true");
      assert.equal(await retry.text(), '{"error":"local-writes-failed"}');
      assert.equal(runs, 1);
    }],
  ];

  return { applied, refused };
}
