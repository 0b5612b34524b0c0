// callWithRetry shares a circuit breaker across actions (core's CircuitBreaker in
// wasm): successive actions against a failing local HTTP server stop sending once
// it opens, leave their actions pending, and resume after its cool-down when a
// probe succeeds. The server counts every request it receives.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import http from "node:http";
import * as idemkit from "idemkit";

const { callWithRetry, createBreaker, createJournal, memoryAdapter } = idemkit;
const servers = new Set();

/** A local server answering 503 while `failing`, 201 otherwise; counts requests. */
async function failingServer() {
  const state = { requests: 0, failing: true };
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      state.requests++;
      const [status, body] = state.failing ? [503, '{"error":"down"}'] : [201, '{"booking":"b-1"}'];
      res.writeHead(status, { "content-type": "application/json", connection: "close" });
      res.end(body);
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  servers.add(server);
  state.url = `http://127.0.0.1:${server.address().port}/bookings`;
  return state;
}

after(() => {
  for (const s of servers) s.close();
});

function call(journal, server, actionId, breaker, extra = {}) {
  return callWithRetry({
    journal,
    actionId,
    url: server.url,
    body: { slot_id: "s-9" },
    baseDelayMs: 1,
    maxDelayMs: 5,
    timeoutMs: 5000,
    ...(breaker === undefined ? {} : { breaker }),
    ...extra,
  });
}

/** Opens `breaker` (3 failures) with a first action: three attempts, the fourth refused. */
async function openBreaker(journal, server, breaker) {
  const first = await call(journal, server, "run-1/step-1", breaker);
  assert.equal(first.status, "pending");
  assert.equal(first.attempts.length, 3);
  assert.equal(first.breaker, "open");
  assert.equal(first.stoppedByBreaker, true);
  assert.equal(typeof first.retryAt, "number");
  assert.equal(server.requests, 3);
}

test("successive actions against a failing endpoint stop at an open breaker", async () => {
  const server = await failingServer();
  const journal = createJournal(memoryAdapter());
  // A cool-down far longer than the test: every later action meets it open.
  const breaker = createBreaker({ failureThreshold: 3, coolDownMs: 600_000 });
  await openBreaker(journal, server, breaker);
  for (let step = 2; step <= 5; step++) {
    const report = await call(journal, server, `run-1/step-${step}`, breaker);
    assert.equal(report.status, "pending");
    assert.equal(report.breaker, "open");
    assert.equal(report.stoppedByBreaker, true);
    assert.ok(report.retryAt > Date.now());
    assert.deepEqual(report.attempts, []);
    assert.equal(server.requests, 3, "the request count stopped growing");
    // The action was journalled with its key, pending, to resume later.
    assert.equal(await journal.status(`run-1/step-${step}`), "pending");
  }
});

test("an open breaker lets a probe through after its cool-down, and its success closes it", async () => {
  const server = await failingServer();
  const journal = createJournal(memoryAdapter());
  const breaker = createBreaker({ failureThreshold: 3, coolDownMs: 300 });
  await openBreaker(journal, server, breaker);

  // Poll with successive actions: refused without sending until the cool-down ends,
  // then one probe; it fails, which reopens the breaker.
  const deadline = Date.now() + 60_000;
  let step = 2;
  for (;;) {
    assert.ok(Date.now() < deadline, "no probe within 60 s");
    const report = await call(journal, server, `run-1/step-${step++}`, breaker);
    assert.equal(report.stoppedByBreaker, true);
    if (report.attempts.length === 0) {
      assert.equal(server.requests, 3);
      await new Promise((r) => setTimeout(r, 25));
      continue;
    }
    assert.equal(report.attempts.length, 1, "one probe, then refused again");
    assert.equal(server.requests, 4);
    assert.equal(report.breaker, "open");
    break;
  }

  // The endpoint recovers: the next probe succeeds and closes the breaker.
  server.failing = false;
  let confirmed;
  for (;;) {
    assert.ok(Date.now() < deadline, "no successful probe within 60 s");
    const before = server.requests;
    const report = await call(journal, server, `run-1/step-${step++}`, breaker);
    if (report.stoppedByBreaker) {
      assert.deepEqual(report.attempts, []);
      assert.equal(server.requests, before);
      await new Promise((r) => setTimeout(r, 25));
      continue;
    }
    confirmed = report;
    break;
  }
  assert.equal(confirmed.status, "confirmed");
  assert.equal(confirmed.attempts.length, 1);
  assert.equal(confirmed.breaker, "closed");
  assert.equal(confirmed.retryAt, null);
  assert.deepEqual(breaker.state, { state: "closed", failures: 0 });
  assert.equal(server.requests, 5);

  // Closed: an action the open breaker left pending resumes with its key, once.
  const resumed = await call(journal, server, "run-1/step-2", breaker);
  assert.equal(resumed.resumed, true);
  assert.equal(resumed.status, "confirmed");
  assert.equal(resumed.attempts.length, 1);
  assert.equal(server.requests, 6);
});

test("by default each origin has its own breaker shared by every action in the runtime", async () => {
  const failing = await failingServer();
  const healthy = await failingServer();
  healthy.failing = false;
  const journal = createJournal(memoryAdapter());
  // Core's defaults: 5 consecutive failures open it for 30 s.
  const first = await call(journal, failing, "run-2/step-1", undefined, { maxAttempts: 5 });
  assert.equal(first.attempts.length, 5);
  assert.equal(first.breaker, "open");
  assert.equal(failing.requests, 5);
  const second = await call(journal, failing, "run-2/step-2", undefined);
  assert.equal(second.status, "pending");
  assert.equal(second.stoppedByBreaker, true);
  assert.deepEqual(second.attempts, []);
  assert.equal(failing.requests, 5, "the second action sent nothing");
  assert.equal(idemkit.originBreaker(failing.url.replace("/bookings", "/other")).state.state, "open");
  // Another origin is not affected, and `breaker: false` turns it off.
  const elsewhere = await call(journal, healthy, "run-2/step-3", undefined);
  assert.equal(elsewhere.status, "confirmed");
  assert.equal(elsewhere.breaker, "closed");
  const unguarded = await call(journal, failing, "run-2/step-4", false, { maxAttempts: 1 });
  assert.equal(unguarded.attempts.length, 1);
  assert.equal(unguarded.breaker, null);
  assert.equal(failing.requests, 6);
});

test("the breaker's rules are core's: which results count, and a bad option is refused", () => {
  let now = 1_000;
  const breaker = createBreaker({ failureThreshold: 2, coolDownMs: 100, clock: () => now });
  assert.deepEqual(breaker.config, { failureThreshold: 2, coolDownMs: 100 });
  const response = (status) => ({ kind: "response", status });
  breaker.record(response(503));
  breaker.record(response(422)); // a definitive answer shows the dependency is up
  assert.deepEqual(breaker.state, { state: "closed", failures: 0 });
  breaker.record({ kind: "timeout" });
  breaker.record(response(429));
  assert.deepEqual(breaker.state, { state: "open", until: 1_100 });
  assert.deepEqual(breaker.allow(), { allowed: false, retryAt: 1_100 });
  now = 1_100;
  assert.deepEqual(breaker.allow(500), { allowed: true, retryAt: null });
  // The probe is out: others are refused for its lease, or until it reports.
  assert.deepEqual(breaker.allow(500), { allowed: false, retryAt: 1_600 });
  breaker.record(response(201));
  assert.deepEqual(breaker.allow(), { allowed: true, retryAt: null });
  assert.throws(() => createBreaker({ failureThreshold: 0 }), { code: "invalid-argument" });
  assert.throws(() => createBreaker({ coolDownMs: -1 }), { code: "invalid-argument" });
});
