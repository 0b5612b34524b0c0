// workerd through Miniflare: the conformance suite over D1 and a Durable Object, and
// the Workers example under 50 concurrent requests with one key, for each store.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as idemkit from "idemkit";
import { miniflare } from "../workerd/miniflare.js";

const here = dirname(fileURLToPath(import.meta.url));
const wasmDir = join(here, "..", "..");

let suite;
let example;
before(async () => {
  const t = Date.now();
  suite = miniflare(
    [join(here, "..", "workerd", "conformance-worker.js"), join(here, "..", "harness.js"), join(here, "..", "conformance.js"), join(here, "..", "journal.js"), join(here, "..", "gc-legacy.js"), join(here, "..", "local-transactions.js"), join(here, "..", "storage-faults.js")],
    { d1Databases: ["DB"], durableObjects: { SUITE: "Suite" } },
  );
  example = miniflare([join(wasmDir, "examples", "workers", "worker.js")], {
    d1Databases: ["DB"],
    durableObjects: { ORDER_BOOK: "OrderBook" },
  });
  await Promise.all([suite.ready, example.ready]);
  console.log(`workerd started in ${Date.now() - t} ms`);
});
after(async () => {
  await suite?.dispose();
  await example?.dispose();
});

/** Runs a shared suite in the suite Worker (its `path`), prints each case, and expects at least `cases` passed, none failed. */
async function suiteInWorkerd(path, cases) {
  const result = await (await suite.dispatchFetch(`http://suite${path}`)).json();
  for (const line of result.lines) console.log(`  ${line.split("\n")[0]}`);
  assert.equal(result.failed, 0, result.lines.filter((l) => l.startsWith("not ok")).join("\n"));
  assert.ok(result.passed >= cases, `ran ${result.passed} cases`);
}

for (const store of ["d1", "do"]) {
  test(`workerd conformance over ${store === "d1" ? "D1" : "a Durable Object"}`, () => suiteInWorkerd(`/conformance/${store}`, 30));
}

test("workerd local transactions over D1: one batch, whose guard fails a refused compare-and-set and so rolls back the orders", () =>
  suiteInWorkerd("/local/d1", 7));
test("workerd local transactions over a Durable Object: one storage transaction", () => suiteInWorkerd("/local/do", 7));

for (const store of ["d1", "do"]) {
  test(`workerd, ${store === "d1" ? "D1" : "a Durable Object"}: 50 concurrent handle calls with one key execute once`, async () => {
    const started = Date.now();
    // Each body is read as soon as its response arrives (as in the Workers
    // example's race test): a response left unread while the others were in
    // flight was found consumed ("Body is unusable") on a loaded machine.
    const responses = await Promise.all(
      Array.from({ length: 50 }, async () => {
        const r = await suite.dispatchFetch(`http://suite/race/${store}`, {
          method: "POST",
          headers: { "idempotency-key": "race-1", "content-type": "application/json" },
          body: '{"sku":"kettle"}',
        });
        await r.arrayBuffer();
        return { status: r.status, replayed: r.headers.get("idempotent-replayed"), retryAfter: r.headers.get("retry-after") };
      }),
    );
    const ms = Date.now() - started;
    const tally = {};
    for (const r of responses) {
      const kind = r.status === 201 ? (r.replayed ? "replayed" : "executed") : r.status === 409 && r.retryAfter ? "inProgress" : `${r.status}`;
      tally[kind] = (tally[kind] ?? 0) + 1;
    }
    const executions = (await (await suite.dispatchFetch(`http://suite/race/${store}/executions`)).json()).n;
    console.log(`workerd ${store}: 50 calls, ${executions} executions, ${JSON.stringify(tally)}, ${ms} ms`);
    assert.equal(executions, 1);
    assert.equal(tally.executed, 1);
    assert.equal(tally.executed + (tally.replayed ?? 0) + (tally.inProgress ?? 0), 50, JSON.stringify(tally));
  });
}

test("workerd, a Durable Object: 50 retries that wait are woken in the object by the completion, one execution, all replays", async () => {
  const send = (headers = {}) =>
    suite.dispatchFetch("http://suite/wait/do", {
      method: "POST",
      headers: { "idempotency-key": "wait-1", "content-type": "application/json", ...headers },
      body: '{"sku":"kettle"}',
    });
  let firstAt;
  const first = send().then((r) => ((firstAt = Date.now()), r));
  await new Promise((resolve) => setTimeout(resolve, 300));
  const retries = await Promise.all(
    Array.from({ length: 50 }, async () => {
      const r = await send({ prefer: "wait=10" });
      const body = await r.text();
      return { status: r.status, replayed: r.headers.get("idempotent-replayed"), applied: r.headers.get("preference-applied"), body, at: Date.now() };
    }),
  );
  const original = await first;
  const originalBody = await original.text();
  const stats = await (await suite.dispatchFetch("http://suite/wait/do/stats")).json();
  const lagMs = Math.max(...retries.map((r) => r.at)) - firstAt;
  console.log(
    `workerd DO: ${stats.executions} execution, ${stats.waitingInWindow} waiting, ${stats.readsInWindow} reads in 1 s of waiting, ` +
      `${stats.reads} reads in all, the last waiter answered ${lagMs} ms after the first attempt's answer`,
  );
  assert.equal(original.status, 201);
  assert.equal(stats.executions, 1);
  assert.equal(stats.waitingInWindow, 50);
  assert.equal(stats.readsInWindow, 0, "a waiter read the record while nothing changed: polling");
  for (const r of retries) {
    assert.deepEqual([r.status, r.replayed, r.applied, r.body], [201, "true", "wait=10", originalBody]);
  }
});

function order(path, key, body = { sku: "kettle", quantity: 1 }, apiKey = "sk_test_acme") {
  return example.dispatchFetch(`http://shop${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "idempotency-key": key, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

async function stats() {
  return (await example.dispatchFetch("http://shop/stats?tenant=acme")).json();
}

for (const [label, path, counter] of [["D1", "/orders", "d1Orders"], ["a Durable Object", "/do/orders", "durableObjectOrders"]]) {
  test(`Workers example, ${label}: 50 concurrent requests with one key create one order`, async () => {
    const before = (await stats())[counter];
    const key = `race-${path.replaceAll("/", "-")}-${Date.now()}`;
    const started = Date.now();
    // Each body is read as soon as its response arrives: a response left unread
    // while 49 others are in flight was once found already consumed
    // ("Body is unusable") when read later under a loaded machine.
    const responses = await Promise.all(
      Array.from({ length: 50 }, async () => {
        const r = await order(path, key);
        await r.arrayBuffer();
        return { status: r.status, replayed: r.headers.get("idempotent-replayed") };
      }),
    );
    const ms = Date.now() - started;
    const tally = {};
    for (const r of responses) {
      const kind = r.status === 201 ? (r.replayed ? "replayed" : "executed") : `${r.status}`;
      tally[kind] = (tally[kind] ?? 0) + 1;
    }
    const created = (await stats())[counter] - before;
    console.log(`workerd ${label}: 50 calls, ${created} executions, ${JSON.stringify(tally)}, ${ms} ms`);
    assert.equal(created, 1);
    assert.equal(tally.executed, 1);
    assert.equal((tally.executed ?? 0) + (tally.replayed ?? 0) + (tally["409"] ?? 0), 50);

    const replay = await order(path, key);
    assert.equal(replay.status, 201);
    assert.equal(replay.headers.get("idempotent-replayed"), "true");
    const reused = await order(path, key, { sku: "toaster", quantity: 2 });
    assert.equal(reused.status, 422);
    assert.equal((await reused.json()).type, "https://idemkit.dev/problems/idempotency-key-reused");
    const otherTenant = await order(path, key, undefined, "sk_test_globex");
    assert.equal(otherTenant.status, 201);
    assert.equal(otherTenant.headers.get("idempotent-replayed"), null);
    const anonymous = await order(path, key, undefined, "nope");
    assert.equal(anonymous.status, 401);
  });
}

test("workerd, D1: a table from the previous schema gains gc_due_at and GC collects its old rows in bounded passes", async () => {
  const result = await (await suite.dispatchFetch("http://suite/gc/d1-upgrade")).json();
  console.log(`workerd D1 upgrade: ${JSON.stringify(result)}`);
  assert.deepEqual(result.columns, ["id", "record", "version", "gc_due_at"]);
  const sum = (field) => result.passes.reduce((n, p) => n + p[field], 0);
  assert.deepEqual(result.passes.map((p) => p.more), [true, true, false], "5 old rows, maxBatch 2");
  assert.equal(sum("deleted"), 3);
  assert.equal(sum("reindexed"), 2, "the recent record and the Unknown one, indexed as core says");
  assert.deepEqual(result.states, { a: null, b: null, c: null, u: "unknown", recent: "completed" });
});

test("Workers example: the Cron Trigger's scheduled handler runs gc over D1: expired records go, Unknown ones stay", async () => {
  // The table exists once the example has answered one request.
  assert.equal((await order("/orders", `gc-warmup-${Date.now()}`)).status, 201);
  // Records written 8 days ago (the default record window is 7 days), by the same
  // core in Node, then stored in the example's D1 as its adapter would store them.
  const written = idemkit.memoryAdapter();
  const eightDaysAgo = Date.now() - 8 * 24 * 3600 * 1000;
  const old = idemkit.createIdempotency({ adapter: written, operation: "orders.create", effect: "external", tenant: () => "acme", clock: () => eightDaysAgo });
  const keys = Array.from({ length: 12 }, (_, i) => `gc-old-${i}`);
  for (const key of keys) await old.complete(await old.claim({ tenant: "acme", key, body: "{}" }), { status: 201, body: key });
  await old.markUnknown(await old.claim({ tenant: "acme", key: "gc-unknown", body: "{}" }), "timeout");
  const due = new Map((await written.scan({ gcDueBefore: Number.MAX_SAFE_INTEGER, limit: 100 })).entries.map((e) => [e.id, e.gcDueAt]));
  const db = await example.getD1Database("DB");
  const ids = [...keys, "gc-unknown"].map((key) => idemkit.recordId("acme", "orders.create", key));
  for (const id of ids) {
    const { record } = await written.get(id);
    await db.prepare("INSERT INTO idemkit_records (id, record, version, gc_due_at) VALUES (?, ?, 1, ?)").bind(id, record, due.get(id) ?? null).run();
  }
  const count = async () => (await db.prepare(`SELECT COUNT(*) AS n FROM idemkit_records WHERE id IN (${ids.map(() => "?").join(",")})`).bind(...ids).first()).n;
  assert.equal(await count(), 13);
  const worker = await example.getWorker();
  const result = await worker.scheduled({ cron: "0 * * * *" });
  assert.equal(result.outcome, "ok");
  assert.equal(await count(), 1, "the 12 expired records deleted");
  const left = await db.prepare("SELECT record FROM idemkit_records WHERE id = ?").bind(ids[12]).first();
  assert.equal(idemkit.decodeRecord(new Uint8Array(left.record)).state, "unknown");
});

test("workerd, D1: d1Schema and d1Upgrade run as migrations give a table GC works on, with createTable: false", async () => {
  const result = await (await suite.dispatchFetch("http://suite/gc/d1-migrations")).json();
  assert.deepEqual(result, { fresh: 1, upgraded: 1, indexes: ["migrated_new_gc_due", "migrated_old_gc_due"] });
});

test("workerd, a Durable Object: rows the previous adapter wrote (no GC key) are indexed by scan and collected", async () => {
  const response = await suite.dispatchFetch("http://suite/gc/do-legacy");
  const text = await response.text();
  assert.equal(response.status, 200, text);
  console.log(`workerd DO legacy rows: ${text}`);
  assert.deepEqual({ ...JSON.parse(text), passes: undefined }, { deleted: 3, reindexed: 2, undecodable: 1, passes: undefined });
});
