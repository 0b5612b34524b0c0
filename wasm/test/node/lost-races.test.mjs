// A store that keeps losing its write races: the handler re-reads and asks the
// machine again, as often as core's bound (machine::MAX_ATTEMPTS, the bound the
// Rust stores use), then gives up with `store-contention` (503 over HTTP),
// never answering from a write it did not make.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as idemkit from "idemkit";

/** Every insert loses (another writer got there first), yet every read finds nothing. */
function alwaysLosingAdapter() {
  const counts = { gets: 0, inserts: 0 };
  return {
    counts,
    adapter: {
      async get() {
        counts.gets++;
        return null;
      },
      async insert() {
        counts.inserts++;
        return null;
      },
      async update() {
        return null;
      },
    },
  };
}

test("a claim that loses every race gives up after core's 32 attempts with store-contention", async () => {
  const { adapter, counts } = alwaysLosingAdapter();
  const idempotency = idemkit.createIdempotency({
    adapter,
    operation: "orders.create",
    effect: "external",
    tenant: () => "acme",
  });
  await assert.rejects(
    idempotency.claim({ tenant: "acme", key: "k-1", body: new TextEncoder().encode("{}") }),
    (err) => err instanceof idemkit.IdemkitError && err.code === "store-contention" && /32 lost write races/.test(err.message),
  );
  // Each attempt reads the record, finds none, and reads the token floor (a
  // fresh record's tokens start above it) before its insert.
  assert.deepEqual(counts, { gets: 64, inserts: 32 });
});

test("over HTTP the same is a 503, and the handler never runs", async () => {
  const { adapter } = alwaysLosingAdapter();
  const idempotency = idemkit.createIdempotency({
    adapter,
    operation: "orders.create",
    effect: "external",
    tenant: () => "acme",
  });
  let ran = 0;
  const response = await idempotency.handle(
    new Request("https://api.test/orders", {
      method: "POST",
      headers: { "content-type": "application/json", "idempotency-key": "k-2" },
      body: "{}",
    }),
    async () => {
      ran++;
      return new Response("{}", { status: 201 });
    },
  );
  assert.equal(response.status, 503);
  assert.equal(ran, 0);
});
