// The memory adapter keeps the engine's small writes in blocks they share (see
// flat.js): every record must stay intact beside its neighbours, a
// GC scan must give the few survivors of a mostly deleted block bytes of their
// own, and an adapter that does not ask for shared blocks never gets one.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as idemkit from "idemkit";
import { inSharedBlock, readingOnly } from "../../pkg/adapters/handover.js";
import { sharedBlockBytes } from "../../pkg/flat.js";

const OPERATION = "payments.capture";
const encode = (value) => new TextEncoder().encode(JSON.stringify(value));
const bodyOf = (i) => encode({ amount: i, note: "x".repeat(i % 97) });
const responseOf = (i) => ({ status: 200 + (i % 7), headers: { "content-type": "application/json" }, body: encode({ id: `pay_${i}`, pad: "y".repeat(i % 53) }) });

/** Claims and completes `count` keys, each with a body and a response of its own. */
async function answerKeys(idem, count) {
  for (let i = 0; i < count; i++) {
    const held = await idem.claim({ tenant: "acme", key: `key-${i}`, body: bodyOf(i) });
    assert.equal(held.outcome, "execute");
    await idem.complete(held, responseOf(i));
  }
}

/** The stored bytes themselves, as the engine reads them (not a copy). */
const storedRecord = (adapter, key) => readingOnly(() => adapter.get(idemkit.recordId("acme", OPERATION, key))).record;

test("hundreds of records sharing blocks each replay their own response", async () => {
  const adapter = idemkit.memoryAdapter();
  const idem = idemkit.createIdempotency({ adapter, operation: OPERATION, effect: "external", tenant: () => "acme" });
  await answerKeys(idem, 600);
  const blocks = new Set();
  for (let i = 0; i < 600; i++) {
    const record = storedRecord(adapter, `key-${i}`);
    assert.ok(inSharedBlock(record), `key-${i}: a ${record.length}-byte record is kept in a shared block`);
    blocks.add(record.buffer);
    const replayed = await idem.claim({ tenant: "acme", key: `key-${i}`, body: bodyOf(i) });
    assert.equal(replayed.outcome, "replay", `key-${i}`);
    assert.equal(replayed.response.status, responseOf(i).status, `key-${i}: status`);
    assert.deepEqual(replayed.response.body, responseOf(i).body, `key-${i}: body`);
  }
  assert.ok(blocks.size < 600 / 8, `600 records in ${blocks.size} blocks of ${sharedBlockBytes} bytes`);
});

test("a GC scan gives the survivors of a mostly deleted block bytes of their own, and leaves full blocks shared", async () => {
  const adapter = idemkit.memoryAdapter();
  const idem = idemkit.createIdempotency({ adapter, operation: OPERATION, effect: "external", tenant: () => "acme" });
  await answerKeys(idem, 400);
  // Delete all but every twentieth record of the first 300; keep the last 100 whole.
  for (let i = 0; i < 300; i++) {
    if (i % 20 === 0) continue;
    const id = idemkit.recordId("acme", OPERATION, `key-${i}`);
    assert.equal(adapter.delete(id, adapter.get(id).version), true);
  }
  const survivors = Array.from({ length: 15 }, (_, n) => `key-${n * 20}`);
  for (const key of survivors) assert.ok(inSharedBlock(storedRecord(adapter, key)), `${key}: still shared before the scan`);

  adapter.scan({ gcDueBefore: 0, limit: 1 });

  for (const key of survivors) {
    const record = storedRecord(adapter, key);
    assert.ok(!inSharedBlock(record), `${key}: its own bytes after the scan`);
    const i = Number(key.slice(4));
    const replayed = await idem.claim({ tenant: "acme", key, body: bodyOf(i) });
    assert.deepEqual(replayed.response.body, responseOf(i).body, `${key}: intact`);
  }
  // A block holds about 29 keys' records (each key's completion, and its claim, now
  // unheld): keys 330 to 369 lie in blocks of undeleted keys, more than half held.
  const kept = Array.from({ length: 40 }, (_, n) => storedRecord(adapter, `key-${330 + n}`));
  assert.ok(kept.every(inSharedBlock), "records of mostly held blocks stay shared");
});

test("an adapter that does not ask for shared blocks gets bytes of its own for every write", async () => {
  const memory = idemkit.memoryAdapter();
  const seen = [];
  const adapter = {
    get: (id) => memory.get(id),
    insert: (id, record, meta) => (seen.push(record), memory.insert(id, record, meta)),
    update: (id, record, version, meta) => (seen.push(record), memory.update(id, record, version, meta)),
  };
  const idem = idemkit.createIdempotency({ adapter, operation: OPERATION, effect: "external", tenant: () => "acme" });
  await answerKeys(idem, 50);
  assert.equal(seen.length, 100);
  for (const record of seen) assert.equal(record.byteLength, record.buffer.byteLength, "a write the adapter may serialize whole");
  // A wrapper spread from the memory adapter does not inherit its claim to keep shared blocks.
  const spreadSeen = [];
  const spread = { ...memory, insert: (id, record, meta) => (spreadSeen.push(record), memory.insert(id, record, meta)) };
  const wrapped = idemkit.createIdempotency({ adapter: spread, operation: "other.op", effect: "external", tenant: () => "acme" });
  await wrapped.claim({ tenant: "acme", key: "spread", body: bodyOf(1) });
  assert.equal(spreadSeen.length, 1);
  assert.ok(!inSharedBlock(spreadSeen[0]), "a spread wrapper gets bytes of its own");
});
