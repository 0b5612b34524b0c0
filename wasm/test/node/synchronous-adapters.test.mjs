// Adapters that answer synchronously: memoryAdapter and sqliteAdapter return
// their results themselves (no promise, so the engine takes no await hop on
// them) and fail with a rejected promise, as an asynchronous adapter does; the
// engine takes either kind of answer, and either kind of failure, from any adapter.
import { test } from "node:test";
import assert from "node:assert/strict";
import Database from "better-sqlite3";
import * as idemkit from "idemkit";
import { readDecideWrite } from "../../pkg/adapters/loop.js";

const adapters = {
  memory: () => idemkit.memoryAdapter(),
  "better-sqlite3": () => idemkit.sqliteAdapter(new Database(":memory:")),
};

const body = new TextEncoder().encode('{"amount":1200}');
const stored = { status: 201, headers: { "content-type": "application/json" }, body: '{"id":"pay_1"}' };

for (const [name, make] of Object.entries(adapters)) {
  test(`${name}: every seam method answers with its result, not a promise`, () => {
    const adapter = make();
    const inserted = adapter.insert("0a01", new Uint8Array([1]), { gcDueAt: 5 });
    assert.ok(!(inserted instanceof Promise) && inserted !== null, "insert");
    const read = adapter.get("0a01");
    assert.ok(!(read instanceof Promise), "get");
    assert.deepEqual([...read.record], [1]);
    const updated = adapter.update("0a01", new Uint8Array([2]), read.version, { gcDueAt: 6 });
    assert.ok(!(updated instanceof Promise) && updated !== null, "update");
    assert.equal(adapter.update("0a01", new Uint8Array([3]), read.version, { gcDueAt: 6 }), null, "a stale compare-and-set is refused at once");
    const page = adapter.scan({ gcDueBefore: 10, limit: 10 });
    assert.ok(!(page instanceof Promise), "scan");
    assert.deepEqual(page.entries.map((e) => e.id), ["0a01"]);
    assert.equal(adapter.delete("0a01", updated.version), true, "delete");
    assert.equal(adapter.get("0a01"), null);
  });

  test(`${name}: a failing method rejects instead of throwing`, async () => {
    const adapter = make();
    const v = adapter.insert("0a02", new Uint8Array([1]), { gcDueAt: null }).version;
    // Local writes of the wrong kind are refused before anything is written.
    const refused = adapter.updateWith("0a02", new Uint8Array([2]), v, { gcDueAt: null }, "not a function");
    assert.ok(refused instanceof Promise, "a failure is a promise");
    await assert.rejects(refused, (err) => err.code === "invalid-argument");
    assert.deepEqual([...adapter.get("0a02").record], [1], "nothing was written");
  });

  test(`${name}: claim, complete and replay resolve as promises`, async () => {
    const idem = idemkit.createIdempotency({ adapter: make(), operation: "payments.capture", effect: "external", tenant: () => "acme" });
    const claimed = idem.claim({ tenant: "acme", key: "k-1", body });
    assert.ok(claimed instanceof Promise, "the API stays asynchronous over a synchronous adapter");
    const held = await claimed;
    assert.equal(held.outcome, "execute");
    const done = await idem.complete(held, stored);
    assert.equal(done.state, "completed");
    const again = await idem.claim({ tenant: "acme", key: "k-1", body });
    assert.equal(again.outcome, "replay");
    assert.equal(new TextDecoder().decode(again.response.body), '{"id":"pay_1"}');
  });
}

/** An adapter over a Map whose methods answer synchronously, or with promises (`async`), and can be made to fail. */
function mapAdapter({ async, failWith }) {
  const rows = new Map();
  const answer = (fn) => (...args) => {
    if (failWith === "throw") throw new Error("disk on fire");
    if (failWith === "reject") return Promise.reject(new Error("disk on fire"));
    return async ? Promise.resolve().then(() => fn(...args)) : fn(...args);
  };
  return {
    name: "mapAdapter",
    get: answer((id) => rows.get(id) ?? null),
    insert: answer((id, record) => {
      if (rows.has(id)) return null;
      rows.set(id, { record: record.slice(), version: 1 });
      return { version: 1 };
    }),
    update: answer((id, record, version) => {
      if (rows.get(id)?.version !== version) return null;
      rows.set(id, { record: record.slice(), version: version + 1 });
      return { version: version + 1 };
    }),
  };
}

for (const async of [false, true]) {
  test(`a user's ${async ? "asynchronous" : "synchronous"} adapter: claim, complete and replay`, async () => {
    const idem = idemkit.createIdempotency({ adapter: mapAdapter({ async }), operation: "op", effect: "external", tenant: () => "acme" });
    const held = await idem.claim({ tenant: "acme", key: "k-1", body });
    assert.equal(held.outcome, "execute");
    await idem.complete(held, stored);
    assert.equal((await idem.claim({ tenant: "acme", key: "k-1", body })).outcome, "replay");
    assert.equal((await idem.claim({ tenant: "acme", key: "k-1", body: new TextEncoder().encode("{}") })).outcome, "mismatch");
  });
}

for (const failWith of ["throw", "reject"]) {
  test(`an adapter that fails by ${failWith === "throw" ? "throwing" : "rejecting"}: the claim rejects with store-unavailable, and handle answers 503`, async () => {
    const idem = idemkit.createIdempotency({ adapter: mapAdapter({ async: false, failWith }), operation: "op", effect: "external", tenant: () => "acme" });
    const claimed = idem.claim({ tenant: "acme", key: "k-1", body });
    assert.ok(claimed instanceof Promise, "a synchronous throw becomes a rejection");
    await assert.rejects(claimed, (err) => err.code === "store-unavailable" && err.cause?.message === "disk on fire");
    const request = new Request("https://api.example/payments", { method: "POST", headers: { "idempotency-key": "k-2", "content-type": "application/json" }, body });
    let ran = false;
    const response = await idem.handle(request, () => {
      ran = true;
      return new Response("charged");
    });
    assert.equal(response.status, 503);
    assert.equal(ran, false, "nothing runs when the store cannot be reached");
  });
}

test("memory: a caller's bytes are copied in and out; between it and the engine's loop they pass as they are", async () => {
  const adapter = idemkit.memoryAdapter();
  const given = new Uint8Array([1, 2, 3]);
  const { version } = adapter.insert("0b01", given, { gcDueAt: null });
  given[0] = 9;
  const read = adapter.get("0b01");
  assert.deepEqual([...read.record], [1, 2, 3], "changing the bytes after insert does not change the record");
  read.record[1] = 9;
  assert.deepEqual([...adapter.get("0b01").record], [1, 2, 3], "changing what get returned does not change the record");
  const update = new Uint8Array([4]);
  adapter.update("0b01", update, version, { gcDueAt: null });
  update[0] = 9;
  assert.deepEqual([...adapter.get("0b01").record], [4], "nor after update");

  // Through the engine's loop the write is handed over: the adapter keeps that
  // array (seen here by changing it, which no engine code does), not a copy.
  const write = new Uint8Array([5, 6]);
  const call = (fn) => fn();
  await readDecideWrite({ adapter, id: "0b02", call, what: "0b02", decide: () => ({ write, answer: null, meta: { gcDueAt: null } }) });
  write[0] = 7;
  assert.deepEqual([...adapter.get("0b02").record], [7, 6], "the handed-over array is the stored one");
  // The mark lasted for that call only: the same array given again is copied.
  adapter.insert("0b03", write, { gcDueAt: null });
  write[0] = 8;
  assert.deepEqual([...adapter.get("0b03").record], [7, 6]);

  // The loop's read is lent the stored array (the engine only reads it).
  let lent;
  await readDecideWrite({ adapter, id: "0b03", call, what: "0b03", decide: (row) => ((lent = row.record), { write: null, answer: null }) });
  lent[1] = 5;
  assert.deepEqual([...adapter.get("0b03").record], [7, 5], "the lent array is the stored one");
  lent[1] = 6;
  const after = adapter.get("0b03").record;
  after[1] = 9;
  assert.deepEqual([...adapter.get("0b03").record], [7, 6], "a read outside the loop is a copy again");
});

test("a table name that is not a plain identifier is refused by what it is; null options take the defaults", () => {
  const db = new Database(":memory:");
  for (const [table, message] of [
    [5, "the table name must be a string, not number"],
    [1n, "the table name must be a string, not bigint"],
    [Symbol("t"), "the table name must be a string, not symbol"],
    ["records; DROP TABLE x", 'invalid table name "records; DROP TABLE x"'],
  ]) {
    assert.throws(() => idemkit.sqliteAdapter(db, { table }), { name: "TypeError", message });
    assert.throws(() => idemkit.d1Schema(table), { name: "TypeError", message });
  }
  const adapter = idemkit.sqliteAdapter(db, null);
  assert.ok(adapter.insert("0a09", new Uint8Array([1]), { gcDueAt: null }));
  assert.equal(db.prepare("SELECT count(*) AS n FROM idemkit_records").get().n, 1);
});

test("the loop answers a synchronous adapter synchronously, and from the first promise on with a promise: the same results, lost races retried either way", async () => {
  const call = (fn) => fn();
  const write = () => ({ write: new Uint8Array([1]), answer: "written", meta: { gcDueAt: null } });

  // All synchronous: the result itself, and a claim through it settles with no adapter promise.
  const memory = idemkit.memoryAdapter();
  const now = readDecideWrite({ adapter: memory, id: "0c01", call, what: "0c01", decide: write });
  assert.ok(!(now instanceof Promise), "no promise on a synchronous adapter");
  assert.equal(now.answer, "written");
  assert.deepEqual([...now.current.record], [1]);

  // Each step that answers with a promise: the loop goes on when it settles.
  const cases = {
    "a read": (adapter) => ({ ...adapter, get: async (id) => adapter.get(id) }),
    "a decision": (adapter) => adapter,
    "a write": (adapter) => ({ ...adapter, insert: async (...args) => adapter.insert(...args), update: async (...args) => adapter.update(...args) }),
  };
  for (const [what, wrap] of Object.entries(cases)) {
    const inner = idemkit.memoryAdapter();
    const adapter = wrap(inner);
    // The first decision loses a race: another writer inserts the row between the read and the write.
    let decisions = 0;
    const decide = (row) => {
      decisions++;
      if (decisions === 1) inner.insert("0c02", new Uint8Array([9]), { gcDueAt: null });
      const decided = { write: new Uint8Array([row === null ? 1 : row.record[0] + 1]), answer: decisions, meta: { gcDueAt: null } };
      return what === "a decision" ? Promise.resolve(decided) : decided;
    };
    const later = readDecideWrite({ adapter, id: "0c02", call, what: "0c02", decide });
    assert.ok(later instanceof Promise, `${what} that is a promise makes the result one`);
    const done = await later;
    assert.equal(done.answer, 2, `${what}: the lost race was decided again on the newer row`);
    assert.deepEqual([...inner.get("0c02").record], [10], `${what}: the second decision's write landed on the row the other writer made`);
  }

  // A refusal: thrown when the loop is synchronous, a rejection once it is not.
  const refuse = () => {
    throw new idemkit.IdemkitError("invalid-argument", "refused");
  };
  assert.throws(() => readDecideWrite({ adapter: memory, id: "0c03", call, what: "0c03", decide: refuse }), { code: "invalid-argument" });
  const asyncRead = { ...memory, get: async (id) => memory.get(id) };
  await assert.rejects(readDecideWrite({ adapter: asyncRead, id: "0c03", call, what: "0c03", decide: refuse }), { code: "invalid-argument" });
  assert.equal(memory.get("0c03"), null, "nothing written");
});
