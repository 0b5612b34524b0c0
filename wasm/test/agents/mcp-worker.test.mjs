// The MCP server in a Worker (wasm/examples/mcp-worker) in workerd through Miniflare,
// bundled by esbuild as Wrangler bundles it: the SDK v2 server, its records and
// bookings in D1 or in the tenant's Durable Object, called by the SDK v2 client
// (2026-07-28) and the SDK v1 client (2025-11-25, served statelessly).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { Miniflare } from "miniflare";
import { MCP_CAPABILITY, MCP_REPLAYED_META, createIdempotency, d1Schema, memoryAdapter, recordId } from "idemkit";
import { workerModules } from "../workerd/miniflare.js";
import { connect, droppingFetch } from "./mcp-clients.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const wasmDir = join(here, "..", "..");
const ERAS = { v2: "2026-07-28", v1: "2025-11-25" };
const API_KEY = "sk_test_clinic_a";

let mf;
before(async () => {
  // As `wrangler deploy` would: one module with the SDK and zod bundled in, `idemkit`
  // left to the package's "workerd" entry (and its .wasm, a compiled module).
  const bundles = join(here, "node_modules", ".idemkit-bundles");
  mkdirSync(bundles, { recursive: true });
  const bundle = async (entry, name) => {
    const outfile = join(bundles, name);
    await build({
      entryPoints: [entry],
      bundle: true,
      format: "esm",
      platform: "neutral",
      conditions: ["workerd", "worker", "import"],
      mainFields: ["module", "main"],
      external: ["idemkit"],
      nodePaths: [join(here, "node_modules")],
      outfile,
      logLevel: "warning",
    });
    return outfile;
  };
  const example = await bundle(join(wasmDir, "examples", "mcp-worker", "worker.js"), "mcp-worker.js");
  const v1 = await bundle(join(here, "v1-worker.js"), "v1-worker.js");
  const started = Date.now();
  // Every instance serves from one D1 database.
  const exampleWorker = (name) => ({
    name,
    ...workerModules([example]),
    d1Databases: { DB: "mcp-bookings" },
    durableObjects: { BOOKING_DESK: "BookingDesk" },
  });
  const v1Worker = { name: "mcp-v1", ...workerModules([v1]), d1Databases: { DB: "mcp-bookings" }, durableObjects: { SESSION_DESK: "SessionDesk" } };
  mf = new Miniflare({ workers: [exampleWorker("mcp-a"), exampleWorker("mcp-b"), v1Worker] });
  await mf.ready;
  console.log(`workerd started in ${Date.now() - started} ms`);
});
after(() => mf?.dispose());

/** A fetch into worker `name` with the clinic's API key. */
function workerFetch(name) {
  return async (url, init = {}) => {
    const worker = await mf.getWorker(name);
    const headers = new Headers(init.headers);
    headers.set("authorization", `Bearer ${API_KEY}`);
    return worker.fetch(url, { ...init, headers });
  };
}

// The SDK v2 server of the example (mcp-a), for 2026-07-28 and 2025 clients, and an
// SDK v1 server (mcp-v1, sessions in a Durable Object) for 2025 clients.
const servers = [];
for (const [store, path] of [["D1", "/mcp"], ["a Durable Object", "/do/mcp"]]) {
  servers.push({ server: "v2", worker: "mcp-a", store, path, sdk: "v2" }, { server: "v2", worker: "mcp-a", store, path, sdk: "v1" });
}
servers.push({ server: "v1", worker: "mcp-v1", store: "D1", path: "/d1/mcp", sdk: "v1" }, { server: "v1", worker: "mcp-v1", store: "a Durable Object", path: "/mcp", sdk: "v1" });

for (const { server, worker, store, path, sdk } of servers) {
  describe(`workerd, SDK ${server} server, records in ${store}, SDK ${sdk} client (${ERAS[sdk]})`, () => {
    const url = new URL(`http://mcp.example${path}`);
    const marker = `${server}-${store === "D1" ? "d1" : "do"}-${sdk}`;

    async function client(fetchFn = workerFetch(worker)) {
      const c = await connect(sdk, url, { fetch: fetchFn });
      assert.equal(c.version, ERAS[sdk]);
      return c;
    }

    /** The bookings of `customer`, read through the read-only tool (no key: never claimed). */
    async function bookings(c, customer) {
      const listed = await c.call("list_bookings", {});
      return listed.result.structuredContent.bookings.filter((b) => b.customer === customer);
    }

    test("a retry after a lost response with the same key executes once and replays", async () => {
      const key = `${marker}-lost`;
      const c = await client(droppingFetch(key, workerFetch(worker)));
      const args = { customer: key, slot: "s-1" };
      const first = await c.call("book", args, key);
      assert.ok(first.error, "the first answer was lost on the way");
      const retry = await c.call("book", args, key);
      assert.equal(retry.result._meta[MCP_REPLAYED_META], true);
      assert.deepEqual(await bookings(c, key), [{ booking: retry.result.structuredContent.booking, customer: key, slot: "s-1" }]);
      await c.close();
    });

    test("50 concurrent calls with one key execute once", async () => {
      const key = `${marker}-race`;
      const c = await client();
      const all = await Promise.all(Array.from({ length: 50 }, () => c.call("book", { customer: key, slot: "s-1" }, key)));
      const results = all.filter((o) => o.result);
      const inProgress = all.filter((o) => o.error?.data?.type === "idempotency_key_in_progress");
      console.log(`workerd ${server} server, ${store}, ${sdk} client: 50 calls: ${results.length} results, ${inProgress.length} in progress`);
      assert.equal(results.length + inProgress.length, 50, JSON.stringify(all.find((o) => !o.result && !inProgress.includes(o))));
      assert.equal(new Set(results.map((o) => o.result.structuredContent.booking)).size, 1);
      assert.equal((await bookings(c, key)).length, 1);
      await c.close();
    });

    test("other arguments under the key are refused and not executed", async () => {
      const key = `${marker}-reuse`;
      const c = await client();
      assert.ok((await c.call("book", { customer: key, slot: "s-1" }, key)).result);
      const other = await c.call("book", { customer: key, slot: "s-2" }, key);
      assert.equal(other.error.code, -31003);
      assert.equal(other.error.data.type, "idempotency_key_conflict");
      assert.deepEqual((await bookings(c, key)).map((b) => b.slot), ["s-1"]);
      await c.close();
    });

    test("a read-only tool is never claimed", async () => {
      const c = await client();
      const key = `${marker}-read`;
      const first = await c.call("list_bookings", {}, key);
      assert.ok((await c.call("book", { customer: key, slot: "s-1" }, `${key}-book`)).result);
      const second = await c.call("list_bookings", {}, key);
      // Run again, not replayed: the second listing sees the booking made in between.
      assert.equal(second.result._meta?.[MCP_REPLAYED_META], undefined);
      const mine = (r) => r.result.structuredContent.bookings.filter((b) => b.customer === key).length;
      assert.deepEqual([mine(first), mine(second)], [0, 1]);
      await c.close();
    });

    // The v2 server serves a 2025 client statelessly, one request per instance, so it
    // cannot push a question to it: it asks 2026-07-28 clients (input_required); the
    // v1 server asks on the session's stream.
    const asks = server === "v1" || sdk === "v2" ? test : () => {};
    asks("an input_required tool executes once and a later retry replays its final result", async () => {
      const key = `${marker}-confirm`;
      const c = await client();
      const args = { customer: key, slot: "s-1" };
      const first = await c.call("book_after_confirmation", args, key);
      assert.ok(first.result?.structuredContent?.booking, JSON.stringify(first));
      assert.equal(c.elicitations(), 1);
      const retry = await c.call("book_after_confirmation", args, key);
      assert.equal(retry.result._meta[MCP_REPLAYED_META], true);
      assert.equal(retry.result.structuredContent.booking, first.result.structuredContent.booking);
      assert.equal(c.elicitations(), 1, "a replay asks nobody");
      assert.equal((await bookings(c, key)).length, 1);
      await c.close();
    });

    test("the server advertises io.idemkit/idempotency and idempotentHint only on protected tools", async () => {
      const c = await client();
      assert.ok(c.capabilities[sdk === "v2" ? "extensions" : "experimental"][MCP_CAPABILITY]);
      const hints = Object.fromEntries((await c.listTools()).map((t) => [t.name, t.annotations?.idempotentHint ?? null]));
      assert.deepEqual(hints, { book: true, book_after_confirmation: true, list_bookings: null });
      await c.close();
    });
  });
}

test("workerd: two server instances on one D1 store still execute once", async () => {
  const key = "two-instances";
  const clients = await Promise.all(["mcp-a", "mcp-b"].map((name) => connect("v2", new URL("http://mcp.example/mcp"), { fetch: workerFetch(name) })));
  const all = await Promise.all(Array.from({ length: 40 }, (_, i) => clients[i % 2].call("book", { customer: key, slot: "s-1" }, key)));
  const results = all.filter((o) => o.result);
  console.log(`workerd two instances: 40 calls: ${results.length} results`);
  for (const o of all) assert.ok(o.result || o.error.data.type === "idempotency_key_in_progress", JSON.stringify(o));
  assert.equal(new Set(results.map((o) => o.result.structuredContent.booking)).size, 1);
  for (const c of clients) {
    const replay = await c.call("book", { customer: key, slot: "s-1" }, key);
    assert.equal(replay.result._meta[MCP_REPLAYED_META], true);
  }
  const listed = await clients[1].call("list_bookings", {});
  assert.equal(listed.result.structuredContent.bookings.filter((b) => b.customer === key).length, 1);
  for (const c of clients) await c.close();
});

test("workerd: a request without a known API key is refused before any MCP handling", async () => {
  const worker = await mf.getWorker("mcp-a");
  const response = await worker.fetch("http://mcp.example/mcp", { method: "POST", body: "{}" });
  assert.equal(response.status, 401);
  await response.arrayBuffer();
});

test("workerd: the example's Cron Trigger collects the D1 records whose windows are over, and keeps unknown ones", async () => {
  // Calls recorded 8 days ago (the default record window is 7 days), by the same core
  // in Node, stored in the example's D1 as its adapter stores them.
  const written = memoryAdapter();
  const eightDaysAgo = Date.now() - 8 * 24 * 3600 * 1000;
  const old = createIdempotency({ adapter: written, operation: "book", effect: "external", tenant: () => "clinic-a", clock: () => eightDaysAgo });
  await old.complete(await old.claim({ tenant: "clinic-a", key: "gc-old", body: "{}" }), { status: 200, body: '{"result":{}}' });
  await old.markUnknown(await old.claim({ tenant: "clinic-a", key: "gc-unknown", body: "{}" }), "timeout");
  const due = new Map((await written.scan({ gcDueBefore: Number.MAX_SAFE_INTEGER, limit: 10 })).entries.map((e) => [e.id, e.gcDueAt]));
  const db = await mf.getD1Database("DB");
  for (const statement of d1Schema().split(";").filter((s) => s.trim())) await db.prepare(statement).run();
  const ids = ["gc-old", "gc-unknown"].map((key) => recordId("clinic-a", "book", key));
  for (const id of ids) {
    const { record } = await written.get(id);
    await db.prepare("INSERT INTO idemkit_records (id, record, version, gc_due_at) VALUES (?, ?, 1, ?)").bind(id, record, due.get(id) ?? null).run();
  }
  const worker = await mf.getWorker("mcp-a");
  assert.equal((await worker.scheduled({ cron: "0 * * * *" })).outcome, "ok");
  const left = await db.prepare("SELECT id FROM idemkit_records WHERE id IN (?, ?)").bind(...ids).all();
  assert.deepEqual(left.results.map((r) => r.id), [ids[1]], "the completed record went, the unknown one stays");
});
