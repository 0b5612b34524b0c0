// The JS handler's lease while its handler runs (real clock, the npm package in Node):
// renewal survives transient store errors, and after `maxExecutionMs` it stops, so a
// hung external execution becomes unresolved and its retry gets 409 outcome-uncertain.
// The waits wait for events (a failure counted, a lease renewed, a lease lapsed), each
// bounded by a generous deadline; nothing asserts a time.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as idemkit from "idemkit";

const DEADLINE_MS = 20_000;

async function eventually(what, done) {
  const deadline = Date.now() + DEADLINE_MS;
  while (!(await done())) {
    assert.ok(Date.now() < deadline, `never happened: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function request(key) {
  return new Request("https://api.test/reports", {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": key, "x-tenant": "acme" },
    body: "{}",
  });
}

/** A memory adapter whose updates fail while `failNext` > 0; counts them. */
function flakyAdapter() {
  const inner = idemkit.memoryAdapter();
  const counts = { failNext: 0, failed: 0, updated: 0 };
  const adapter = {
    get: (id) => inner.get(id),
    insert: (id, r) => inner.insert(id, r),
    async update(id, r, v) {
      if (counts.failNext > 0) {
        counts.failNext--;
        counts.failed++;
        throw new Error("connection reset");
      }
      const written = await inner.update(id, r, v);
      if (written) counts.updated++;
      return written;
    },
  };
  return { adapter, counts };
}

/** A handler that counts its runs and answers 201 once `open()` is called. */
function gatedHandler() {
  const state = { runs: 0 };
  let open;
  const gate = new Promise((resolve) => (open = resolve));
  const handler = async () => {
    state.runs++;
    await gate;
    return new Response(`report ${state.runs}`, { status: 201 });
  };
  return { state, handler, open: () => open() };
}

test("lease renewal survives transient store errors: the key stays held, the handler runs once", async () => {
  const { adapter, counts } = flakyAdapter();
  // Local: a lapsed lease would let the retry take the key over and run it again.
  const idem = createIdem(adapter, "local", { policy: { leaseMs: 1_500 } });
  const { state, handler, open } = gatedHandler();
  const first = idem.handle(request("k"), handler);
  await eventually("the handler started", () => state.runs === 1);
  // Nothing but the renewals writes while the handler waits.
  counts.failNext = 4;
  await eventually("four renewals failed", () => counts.failed === 4);
  const renewed = counts.updated;
  await eventually("a renewal succeeded after them", () => counts.updated > renewed);
  const retry = await idem.handle(request("k"), handler);
  assert.equal(retry.status, 409);
  assert.match(await retry.text(), /request-in-progress/);
  open();
  const answered = await first;
  assert.equal(answered.status, 201);
  assert.equal(await answered.text(), "report 1");
  const replay = await idem.handle(request("k"), handler);
  assert.equal(replay.headers.get("idempotent-replayed"), "true");
  assert.equal(await replay.text(), "report 1");
  assert.equal(state.runs, 1);
});

test("a hung handler past maxExecutionMs becomes unresolved and its retry is uncertain", async () => {
  const { adapter } = flakyAdapter();
  const idem = createIdem(adapter, "external", { policy: { leaseMs: 300 }, maxExecutionMs: 600 });
  const { state, handler, open } = gatedHandler();
  const first = idem.handle(request("k"), handler);
  await eventually("the handler started", () => state.runs === 1);
  // Unresolved: Running past its lease (what an operator's unresolved list shows).
  await eventually("the lease lapsed", async () => {
    const record = await idem.inspect({ tenant: "acme", key: "k" });
    return record.state === "running" && record.leaseExpiresAt < Date.now();
  });
  const retry = await idem.handle(request("k"), handler);
  assert.equal(retry.status, 409);
  assert.match(await retry.text(), /outcome-uncertain/);
  assert.equal((await idem.inspect({ tenant: "acme", key: "k" })).state, "unknown");
  assert.equal(state.runs, 1, "never executed twice");
  // The handler finally answers: the late outcome of the expired lease is accepted.
  open();
  assert.equal((await first).status, 201);
  const replay = await idem.handle(request("k"), handler);
  assert.equal(await replay.text(), "report 1");
  assert.equal(state.runs, 1);
});

test("the completion waits for a renewal in progress: the two writes never overlap", async () => {
  const inner = idemkit.memoryAdapter();
  const log = [];
  let updates = 0;
  let releaseRenewal = null;
  const adapter = {
    get: (id) => inner.get(id),
    insert: (id, r) => inner.insert(id, r),
    async update(id, r, v) {
      const n = updates++;
      log.push(`start ${n}`);
      // The first update is the handler's first renewal: held until the test lets it go.
      if (n === 0) await new Promise((resolve) => (releaseRenewal = resolve));
      const written = await inner.update(id, r, v);
      log.push(`end ${n}`);
      return written;
    },
  };
  const idem = createIdem(adapter, "external", { policy: { leaseMs: 300 } });
  const { state, handler, open } = gatedHandler();
  const first = idem.handle(request("k"), handler);
  await eventually("a renewal is in progress", () => releaseRenewal !== null);
  // The handler answers while the renewal is held: its completion must wait for it.
  open();
  await eventually("the handler answered", () => state.runs === 1);
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.deepEqual(log, ["start 0"], "nothing else was written while the renewal was in progress");
  releaseRenewal();
  const answered = await first;
  assert.equal(answered.status, 201);
  assert.deepEqual(log.slice(0, 3), ["start 0", "end 0", "start 1"]);
  assert.equal((await idem.inspect({ tenant: "acme", key: "k" })).state, "completed");
});

test("maxExecutionMs is validated when the handler is created", () => {
  const { adapter } = flakyAdapter();
  assert.throws(() => createIdem(adapter, "external", { maxExecutionMs: -1 }), /maxExecutionMs/);
});

function createIdem(adapter, effect, options = {}) {
  return idemkit.createIdempotency({
    adapter,
    operation: "reports.generate",
    effect,
    tenant: (r) => r.headers.get("x-tenant"),
    ...options,
  });
}
