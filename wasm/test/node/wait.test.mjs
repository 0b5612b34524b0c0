// A retry of a running key that asks to wait (`Prefer: wait=N`) is held until the
// first attempt's answer exists, in Node with the npm package: woken by the memory
// adapter's own write (no polling), by a release (then it executes), refused at
// once on a changed body, let go when its wait ends or its client aborts, refused
// with 503 past the waiter caps; over SQLite it polls on core's schedule. And
// callWithRetry asks to wait on the retry after a 409 request-in-progress.
import { test } from "node:test";
import assert from "node:assert/strict";
import Database from "better-sqlite3";
import * as idemkit from "idemkit";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function order(key, { wait, body = '{"sku":"kettle"}', signal } = {}) {
  const headers = { "idempotency-key": key, "content-type": "application/json" };
  if (wait !== undefined) headers.prefer = `wait=${wait}`;
  return new Request("https://shop.test/orders", { method: "POST", headers, body, signal });
}

/**
 * `inner` with every `get` counted (and timed, in `reads`), and its `changed`
 * registrations counted while open: the evidence of polling, and of a waiter left
 * registered.
 */
function counted(inner) {
  const seen = { reads: [], open: 0 };
  const adapter = {
    name: inner.name,
    get: (id) => {
      seen.reads.push(Date.now());
      return inner.get(id);
    },
    insert: (...args) => inner.insert(...args),
    update: (...args) => inner.update(...args),
    delete: (...args) => inner.delete(...args),
    scan: (...args) => inner.scan(...args),
  };
  if (typeof inner.changed === "function") {
    adapter.changed = async (id, signal) => {
      seen.open++;
      try {
        await inner.changed(id, signal);
      } finally {
        seen.open--;
      }
    };
  }
  return { adapter, seen };
}

/** A handler that takes `ms` and answers 201 with an order numbered by its executions. */
function slowOrders(ms) {
  let returned;
  const run = { executions: 0, returnedAt: null, returned: new Promise((resolve) => (returned = resolve)) };
  const handler = async (request) => {
    const n = ++run.executions;
    const { sku } = await request.json();
    await sleep(ms);
    run.returnedAt = Date.now();
    returned();
    return Response.json({ order: `o-${n}`, sku }, { status: 201 });
  };
  return { run, handler };
}

async function until(what, done, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!done()) {
    assert.ok(Date.now() < deadline, `never happened: ${what}`);
    await sleep(5);
  }
}

test("100 retries that wait for a 3 s execution: one execution, every retry the stored 201 soon after the completion, not at its 10 s wait, no polling", async () => {
  const { adapter, seen } = counted(idemkit.memoryAdapter());
  const idem = idemkit.createIdempotency({ adapter, operation: "orders.create", effect: "external", tenant: () => "acme" });
  const { run, handler } = slowOrders(3000);
  const first = idem.handle(order("k-100"), handler);
  await until("the first attempt runs", () => run.executions === 1);
  const answeredAt = [];
  const retries = Array.from({ length: 100 }, (_, i) =>
    idem.handle(order("k-100", { wait: 10 }), handler).then((response) => {
      answeredAt[i] = Date.now();
      return response;
    }),
  );
  await until("100 retries wait", () => idem.waiting() === 100);
  // From here until the completion nothing should run: every waiter sleeps on the
  // adapter's waker, and the lease (30 s) does not run out. A poll loop would read the
  // record (counted) and burn CPU in proportion to the wall time.
  const readsBefore = seen.reads.length;
  const cpuBefore = process.cpuUsage();
  const wallBefore = performance.now();
  await run.returned;
  const cpu = process.cpuUsage(cpuBefore);
  const wallMs = performance.now() - wallBefore;
  const readsDuringWait = seen.reads.filter((at) => at < run.returnedAt).length - readsBefore;
  const cpuFraction = (cpu.user + cpu.system) / 1000 / wallMs;

  const original = await first;
  assert.equal(original.status, 201);
  const originalBody = await original.text();
  const responses = await Promise.all(retries);
  const lagMs = Math.max(...answeredAt) - run.returnedAt;
  console.log(
    `100 waiters: ${run.executions} execution, waited ${wallMs.toFixed(0)} ms with ${readsDuringWait} reads and ` +
      `${((cpu.user + cpu.system) / 1000).toFixed(1)} ms CPU (${(cpuFraction * 100).toFixed(2)} %), last answer ${lagMs} ms after the handler returned`,
  );
  assert.equal(run.executions, 1);
  for (const response of responses) {
    assert.equal(response.status, 201);
    assert.equal(response.headers.get("idempotent-replayed"), "true");
    assert.equal(response.headers.get("preference-applied"), "wait=10");
    assert.equal(await response.text(), originalBody);
  }
  // Woken by the completion, not by their 10 s wait running out. The bound is loose
  // on purpose: 100 waiters answered on a busy 2-core machine took 125 ms once; the
  // absence of polling is what the read count below proves.
  assert.ok(lagMs < 2000, `the last waiter was answered ${lagMs} ms after the completion`);
  assert.equal(readsDuringWait, 0, "a waiter read the record while nothing changed: polling");
  // Idle waiting costs next to nothing; 20 % leaves room for the test runner, GC and
  // a loaded machine, while a waiter spinning on the event loop would take ~100 %.
  assert.ok(cpuFraction < 0.2, `CPU ${(cpuFraction * 100).toFixed(1)} % of the wait`);
  assert.equal(idem.waiting(), 0);
  assert.equal(seen.open, 0, "a waker registration was left behind");
});

test("a first attempt that releases its claim wakes its waiter, which executes once as a new attempt", async () => {
  const { adapter, seen } = counted(idemkit.memoryAdapter());
  const idem = idemkit.createIdempotency({ adapter, operation: "orders.create", effect: "local", tenant: () => "acme" });
  let executions = 0;
  let releasedAt = null;
  const handler = async () => {
    executions++;
    if (executions === 1) {
      await sleep(300);
      releasedAt = Date.now();
      throw new Error("the local transaction rolled back"); // local effect: the claim is released
    }
    return Response.json({ order: "o-2" }, { status: 201 });
  };
  const first = idem.handle(order("k-release"), handler).then(
    () => assert.fail("the first attempt threw"),
    (err) => err,
  );
  await until("the first attempt runs", () => executions === 1);
  const waiter = idem.handle(order("k-release", { wait: 5 }), handler);
  await until("the retry waits", () => idem.waiting() === 1);
  const response = await waiter;
  const lagMs = Date.now() - releasedAt;
  assert.match((await first).message, /rolled back/);
  console.log(`released: the waiter executed and answered ${lagMs} ms after the release`);
  assert.equal(executions, 2);
  assert.equal(response.status, 201);
  assert.equal(response.headers.get("idempotent-replayed"), null);
  assert.equal(response.headers.get("preference-applied"), "wait=5");
  assert.deepEqual(await response.json(), { order: "o-2" });
  assert.ok(lagMs < 100, `answered ${lagMs} ms after the release`);
  assert.equal(idem.waiting(), 0);
  assert.equal(seen.open, 0);
  // And the new outcome is the one replayed.
  const replay = await idem.handle(order("k-release"), handler);
  assert.equal(replay.headers.get("idempotent-replayed"), "true");
  assert.equal(executions, 2);
});

test("a wait that runs out gets 409 request-in-progress with Retry-After; a wait asked beyond the cap is capped", async () => {
  const idem = idemkit.createIdempotency({ adapter: idemkit.memoryAdapter(), operation: "orders.create", effect: "external", tenant: () => "acme", maxWaitMs: 1000 });
  const { run, handler } = slowOrders(2500);
  const first = idem.handle(order("k-timeout"), handler);
  await until("the first attempt runs", () => run.executions === 1);
  const started = Date.now();
  const response = await idem.handle(order("k-timeout", { wait: 60 }), handler);
  const waitedMs = Date.now() - started;
  console.log(`asked 60 s, capped at 1 s: answered 409 after ${waitedMs} ms`);
  assert.equal(response.status, 409);
  assert.equal((await response.json()).type, "https://idemkit.dev/problems/request-in-progress");
  assert.ok(Number(response.headers.get("retry-after")) >= 1);
  assert.equal(response.headers.get("preference-applied"), "wait=1");
  assert.ok(waitedMs >= 990 && waitedMs < 2000, `waited ${waitedMs} ms`);
  assert.equal(idem.waiting(), 0);
  assert.equal((await first).status, 201);
  assert.equal(run.executions, 1);
});

test("a route that waits by default holds a retry that asked nothing, without Preference-Applied", async () => {
  const idem = idemkit.createIdempotency({ adapter: idemkit.memoryAdapter(), operation: "orders.create", effect: "external", tenant: () => "acme", waitMs: 5000 });
  const { run, handler } = slowOrders(300);
  const first = idem.handle(order("k-default"), handler);
  await until("the first attempt runs", () => run.executions === 1);
  const response = await idem.handle(order("k-default"), handler);
  assert.equal(response.status, 201);
  assert.equal(response.headers.get("idempotent-replayed"), "true");
  assert.equal(response.headers.get("preference-applied"), null);
  await first;
  assert.equal(run.executions, 1);
  // Without a default wait and without asking: 409 at once, as before.
  const plain = idemkit.createIdempotency({ adapter: idemkit.memoryAdapter(), operation: "orders.create", effect: "external", tenant: () => "acme" });
  const second = plain.handle(order("k-plain"), handler);
  await until("the first attempt runs", () => run.executions === 2);
  const refused = await plain.handle(order("k-plain"), handler);
  assert.equal(refused.status, 409);
  assert.equal(refused.headers.get("preference-applied"), null);
  await second;
});

test("a retry with a changed body is refused 422 at once, never held", async () => {
  const idem = idemkit.createIdempotency({ adapter: idemkit.memoryAdapter(), operation: "orders.create", effect: "external", tenant: () => "acme" });
  const { run, handler } = slowOrders(1000);
  const first = idem.handle(order("k-changed"), handler);
  await until("the first attempt runs", () => run.executions === 1);
  const started = Date.now();
  const response = await idem.handle(order("k-changed", { wait: 10, body: '{"sku":"toaster"}' }), handler);
  const ms = Date.now() - started;
  assert.equal(response.status, 422);
  assert.equal(response.headers.get("preference-applied"), null);
  assert.ok(ms < 100, `answered after ${ms} ms`);
  assert.equal(idem.waiting(), 0);
  await first;
});

test("a waiter whose client aborts stops waiting and leaves nothing registered", async () => {
  const { adapter, seen } = counted(idemkit.memoryAdapter());
  const idem = idemkit.createIdempotency({ adapter, operation: "orders.create", effect: "external", tenant: () => "acme" });
  const { run, handler } = slowOrders(1500);
  const first = idem.handle(order("k-abort"), handler);
  await until("the first attempt runs", () => run.executions === 1);
  const client = new AbortController();
  const waiter = idem.handle(order("k-abort", { wait: 10, signal: client.signal }), handler);
  await until("the retry waits", () => idem.waiting() === 1 && seen.open === 1);
  const abortedAt = Date.now();
  client.abort();
  await waiter;
  const ms = Date.now() - abortedAt;
  assert.ok(ms < 100, `let go ${ms} ms after the abort`);
  assert.equal(idem.waiting(), 0);
  assert.equal(seen.open, 0);
  await first;
  assert.equal(run.executions, 1);
});

test("past the waiter caps a retry that asks to wait gets 503 too-many-waiters with Retry-After", async () => {
  const idem = idemkit.createIdempotency({
    adapter: idemkit.memoryAdapter(),
    operation: "orders.create",
    effect: "external",
    tenant: () => "acme",
    maxWaitersPerKey: 2,
    maxWaiters: 3,
  });
  const { run, handler } = slowOrders(800);
  const firsts = [idem.handle(order("k-cap-a"), handler), idem.handle(order("k-cap-b"), handler)];
  await until("both first attempts run", () => run.executions === 2);
  const held = [idem.handle(order("k-cap-a", { wait: 10 }), handler), idem.handle(order("k-cap-a", { wait: 10 }), handler)];
  await until("two wait on one key", () => idem.waiting() === 2);
  const perKey = await idem.handle(order("k-cap-a", { wait: 10 }), handler);
  assert.equal(perKey.status, 503);
  assert.equal((await perKey.json()).type, "https://idemkit.dev/problems/too-many-waiters");
  assert.ok(Number(perKey.headers.get("retry-after")) >= 1);
  assert.equal(perKey.headers.get("preference-applied"), null);
  held.push(idem.handle(order("k-cap-b", { wait: 10 }), handler));
  await until("three wait in all", () => idem.waiting() === 3);
  const total = await idem.handle(order("k-cap-b", { wait: 10 }), handler);
  assert.equal(total.status, 503);
  for (const response of await Promise.all(held)) assert.equal(response.headers.get("idempotent-replayed"), "true");
  await Promise.all(firsts);
  assert.equal(run.executions, 2);
  assert.equal(idem.waiting(), 0);
});

test("the wait options are checked when the handler is made", () => {
  const base = { adapter: idemkit.memoryAdapter(), operation: "o", effect: "local", tenant: () => "t" };
  for (const bad of [{ waitMs: -1 }, { maxWaitMs: 1.5 }, { maxWaiters: 0 }, { maxWaitersPerKey: "10" }]) {
    assert.throws(() => idemkit.createIdempotency({ ...base, ...bad }), { code: "invalid-argument" }, JSON.stringify(bad));
  }
});

test("over SQLite a waiter polls the record on core's backoff and is answered within the wait", async () => {
  const { adapter, seen } = counted(idemkit.sqliteAdapter(new Database(":memory:")));
  const idem = idemkit.createIdempotency({ adapter, operation: "orders.create", effect: "external", tenant: () => "acme" });
  const { run, handler } = slowOrders(1200);
  const first = idem.handle(order("k-sqlite"), handler);
  await until("the first attempt runs", () => run.executions === 1);
  const readsBefore = seen.reads.length;
  const response = await idem.handle(order("k-sqlite", { wait: 10 }), handler);
  const lagMs = Date.now() - run.returnedAt;
  const polls = seen.reads.length - readsBefore - 1; // the retry's own first read is not a poll
  console.log(`SQLite: the waiter polled ${polls} times and was answered ${lagMs} ms after the handler returned`);
  assert.equal(response.status, 201);
  assert.equal(response.headers.get("idempotent-replayed"), "true");
  assert.equal(response.headers.get("preference-applied"), "wait=10");
  assert.equal(run.executions, 1);
  // 50, 100, 200, 400, 800 ms: at most 5 polls in 1.2 s, and the answer within
  // one pause (at most 1 s) of the completion.
  assert.ok(polls >= 2 && polls <= 6, `${polls} polls`);
  assert.ok(lagMs < 1000, `answered ${lagMs} ms after the completion`);
  await first;
});

test("callWithRetry asks to wait on the retry after a 409 request-in-progress", async () => {
  const journal = idemkit.createJournal({ adapter: idemkit.memoryAdapter() });
  const sent = [];
  const fetch = async (url, init) => {
    const headers = new Headers(init.headers);
    sent.push(headers.get("prefer"));
    if (sent.length === 1) {
      return Response.json(
        { type: "https://idemkit.dev/problems/request-in-progress", title: "running", status: 409 },
        { status: 409, headers: { "retry-after": "30", "content-type": "application/problem+json" } },
      );
    }
    return Response.json({ order: "o-1" }, { status: 201, headers: { "idempotent-replayed": "true", "preference-applied": "wait=10" } });
  };
  const started = Date.now();
  const report = await idemkit.callWithRetry({ journal, actionId: "run-1/order", url: "https://shop.test/orders", body: { sku: "kettle" }, fetch, baseDelayMs: 1 });
  assert.equal(report.status, "confirmed");
  assert.deepEqual(sent, [null, "wait=10"]);
  // The waiting retry goes after the backoff, not the 409's 30 s Retry-After.
  assert.ok(Date.now() - started < 5000, `${Date.now() - started} ms`);

  const asked = [];
  const twice = async (url, init) => {
    asked.push(new Headers(init.headers).get("prefer"));
    return asked.length === 1
      ? Response.json({ type: "https://idemkit.dev/problems/request-in-progress" }, { status: 409, headers: { "retry-after": "1" } })
      : new Response("{}", { status: 201 });
  };
  await idemkit.callWithRetry({ journal, actionId: "run-2/order", url: "https://shop.test/orders", body: {}, fetch: twice, waitSeconds: 0 });
  assert.deepEqual(asked, [null, null], "waitSeconds: 0 never asks");
  await assert.rejects(idemkit.callWithRetry({ journal, actionId: "run-3/order", url: "https://shop.test/orders", fetch: twice, waitSeconds: -1 }), { code: "invalid-argument" });
});

test("end to end: callWithRetry's waiting retry is held by the handler until the first attempt's answer", async () => {
  // A 2 s lease (renewed while the handler runs) makes the in-progress Retry-After 2 s;
  // the waiting retry does not sleep it, the handler holds it instead.
  const idem = idemkit.createIdempotency({ adapter: idemkit.memoryAdapter(), operation: "orders.create", effect: "external", tenant: () => "acme", policy: { leaseMs: 2000 } });
  const { run, handler } = slowOrders(4000);
  const journal = idemkit.createJournal({ adapter: idemkit.memoryAdapter() });
  const seen = [];
  // The first attempt's answer is lost (a timeout while the handler runs on); the
  // retry arrives while it runs and gets 409; the one after that asks to wait.
  const fetch = async (url, init) => {
    const request = new Request(url, init);
    const answer = idem.handle(request, handler);
    if (seen.length === 0) {
      seen.push({ prefer: null, status: null });
      return new Promise((_, reject) => init.signal.addEventListener("abort", () => reject(init.signal.reason)));
    }
    const response = await answer;
    seen.push({ prefer: request.headers.get("prefer"), status: response.status, applied: response.headers.get("preference-applied") });
    return response;
  };
  const report = await idemkit.callWithRetry({ journal, actionId: "run-9/order", url: "https://shop.test/orders", body: { sku: "kettle" }, fetch, timeoutMs: 200, baseDelayMs: 1 });
  assert.equal(report.status, "confirmed");
  assert.equal(report.httpStatus, 201);
  assert.equal(run.executions, 1);
  assert.deepEqual(seen, [
    { prefer: null, status: null },
    { prefer: null, status: 409, applied: null },
    { prefer: "wait=10", status: 201, applied: "wait=10" },
  ]);
});
