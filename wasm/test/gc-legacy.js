// Records an earlier release wrote, before the adapters kept a GC index, must be
// collected once the current adapter is used on the same store: the Durable Object
// and Deno KV adapters walk the old rows (bounded, at most `limit` per scan) and
// index each as due at once, so GC decodes it and deletes it or indexes its real
// due time. Shared by the workerd (Durable Object) and Deno (Deno KV) runners.
import { assert } from "./harness.js";

const T0 = 1_700_000_000_000;
const POLICY = { replayWindowMs: 60_000, recordWindowMs: 120_000 };

/**
 * @param {typeof import("idemkit")} idemkit
 * @param {import("idemkit").Adapter} adapter the current adapter over the store
 * @param {(id: string, bytes: Uint8Array) => Promise<void>} putLegacy writes a row as the previous release did
 */
export async function legacyRowsAreCollected(idemkit, adapter, putLegacy) {
  const clock = { now: T0 };
  const scratch = idemkit.memoryAdapter();
  const options = (a) => ({ adapter: a, operation: "orders.create", effect: "external", tenant: () => "acme", clock: () => clock.now, policy: POLICY });
  const old = idemkit.createIdempotency(options(scratch));
  const claim = (key) => ({ tenant: "acme", key, body: "{}" });
  const keys = ["a", "b", "c", "u", "recent"];
  for (const key of ["a", "b", "c"]) await old.complete(await old.claim(claim(key)), { status: 201, body: key });
  await old.markUnknown(await old.claim(claim("u")), "timeout");
  clock.now += 100_000;
  await old.complete(await old.claim(claim("recent")), { status: 201, body: "recent" });
  for (const key of keys) {
    const id = idemkit.recordId("acme", "orders.create", key);
    await putLegacy(id, (await scratch.get(id)).record);
  }
  // A journal entry in the same store: not a record.
  await putLegacy("action:run-1/step-1", new TextEncoder().encode('{"not":"a record"}'));
  clock.now += 30_000;
  const idem = idemkit.createIdempotency(options(adapter));
  const total = { deleted: 0, reindexed: 0, undecodable: 0, passes: 0 };
  for (;;) {
    const report = await idem.gc({ maxBatch: 2 });
    total.passes++;
    total.deleted += report.deleted;
    total.reindexed += report.reindexed;
    total.undecodable += report.undecodable;
    assert.ok(total.passes < 20, "GC settles");
    if (!report.more && report.deleted + report.reindexed + report.undecodable === 0) break;
  }
  assert.equal(total.deleted, 3, "the three past their record window");
  assert.equal(total.reindexed, 2, "the Unknown and the recent record");
  assert.equal(total.undecodable, 1, "the journal entry");
  const states = {};
  for (const key of keys) states[key] = (await idem.inspect(claim(key)))?.state ?? null;
  assert.equal(JSON.stringify(states), '{"a":null,"b":null,"c":null,"u":"unknown","recent":"completed"}');
  // The recent record's replay window ends at T0 + 160 s: found by its real due time.
  clock.now = T0 + 161_000;
  assert.equal((await idem.gc()).pruned, 1);
  clock.now = T0 + 10 * 365 * 24 * 3600 * 1000;
  assert.equal((await idem.gc()).deleted, 1);
  assert.equal((await idem.inspect(claim("u"))).state, "unknown");
  assert.ok((await adapter.get("action:run-1/step-1")) !== null, "the journal entry is kept");
  return total;
}
