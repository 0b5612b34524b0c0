// The journal suite: createJournal / beginAction / callWithRetry over any adapter,
// in every runtime (Node, Deno, Bun, workerd). Requests go to a scripted `fetch`
// that records what it was sent, so each case knows exactly which attempts were
// made with which headers. (The end-to-end cases against the real appointments
// service are in test/node/agent-journal.test.mjs.)
import { assert } from "./harness.js";

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const PROBLEMS = "https://idemkit.dev/problems/";
const FAST = { baseDelayMs: 1, maxDelayMs: 5 };

/**
 * A fetch that answers from `script` (one entry per call: a function of the
 * request returning a Response, or "hang" to wait until aborted) and records
 * every request it saw.
 */
function scriptedFetch(script) {
  const seen = [];
  const fetch = async (url, init) => {
    const headers = new Headers(init.headers);
    seen.push({ url, method: init.method, headers, body: init.body, redirect: init.redirect });
    const step = script[Math.min(seen.length - 1, script.length - 1)];
    if (step === "hang") {
      return new Promise((_, reject) => {
        init.signal.addEventListener("abort", () => reject(init.signal.reason), { once: true });
      });
    }
    if (typeof step === "function") return step({ url, headers, body: init.body });
    throw new Error(`unexpected step ${step}`);
  };
  return { fetch, seen };
}

const json = (status, body, headers = {}) => () =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });
const problem = (status, name, extra = {}, headers = {}) => () =>
  new Response(JSON.stringify({ type: PROBLEMS + name, title: name, status, ...extra }), {
    status,
    headers: { "content-type": "application/problem+json", ...headers },
  });

/**
 * @param {typeof import("idemkit")} idemkit the package as imported in this runtime
 * @param {() => Promise<import("idemkit").Adapter> | import("idemkit").Adapter} makeAdapter a fresh, empty adapter per case
 * @returns {[string, () => Promise<void>][]}
 */
export function journalCases(idemkit, makeAdapter) {
  const { createJournal, beginAction, callWithRetry, IdemkitError } = idemkit;

  async function setup() {
    const adapter = await makeAdapter();
    return { adapter, journal: createJournal({ adapter }) };
  }

  const call = (journal, fetch, extra = {}) =>
    callWithRetry({
      journal,
      actionId: "run-42/book",
      url: "https://api.test/appointments",
      headers: { authorization: "Bearer acme" },
      body: { customer_id: "c1", slot_id: "2026-12-01T10:00" },
      fetch,
      timeoutMs: 200,
      ...FAST,
      ...extra,
    });

  return [
    ["journal: begin creates a UUID v4 key, stores it, and returns it again for the same payload", async () => {
      const { adapter, journal } = await setup();
      const first = await beginAction(journal, "run-1/step-3", { slot: "s-9", party: [1, 2] });
      assert.ok(UUID_V4.test(first.key), `a UUID v4: ${first.key}`);
      assert.equal(first.resumed, false);
      // Another journal over the same store (a restart, a second worker) sees it at once.
      const again = await createJournal({ adapter }).begin("run-1/step-3", { party: [1.0, 2], slot: "s-9" });
      assert.equal(again.key, first.key, "same action, same key");
      assert.equal(again.resumed, true);
      assert.equal(JSON.stringify(again.payload), '{"party":[1,2],"slot":"s-9"}');
      const other = await journal.begin("run-1/step-4", { slot: "s-9", party: [1, 2] });
      assert.notEqual(other.key, first.key, "another action id, another key");
    }],

    ["journal: a different payload under an existing action id throws action-payload-changed", async () => {
      const { journal } = await setup();
      const first = await journal.begin("run-1/pay", { amount: 100 });
      const err = await assert.rejects(() => journal.begin("run-1/pay", { amount: 101 }), "action-payload-changed");
      assert.ok(err instanceof IdemkitError, "an IdemkitError");
      assert.equal(err.actionId, "run-1/pay");
      assert.ok(err.message.includes('"run-1/pay"'), `names the action: ${err.message}`);
      assert.equal((await journal.begin("run-1/pay", { amount: 100 })).key, first.key, "the original payload still resumes");
      await assert.rejects(() => journal.begin("", {}), "action-id-invalid");
      await assert.rejects(() => journal.begin("x".repeat(1025), {}), "action-id-invalid");
      await assert.rejects(() => journal.begin("a", undefined), "invalid-argument");
    }],

    ["journal: a chosen key (deriveKey) is kept, and a resumed action keeps its own", async () => {
      const { journal } = await setup();
      const derived = idemkit.deriveKey("travel-agent", "run-7", "book-flight");
      assert.ok(/^ik1-[0-9a-f]{32}$/.test(derived), derived);
      const a = await journal.begin("run-7/book-flight", { to: "LIS" }, { key: derived });
      assert.equal(a.key, derived);
      const b = await journal.begin("run-7/book-flight", { to: "LIS" }, { key: "something-else" });
      assert.equal(b.key, derived);
      await assert.rejects(() => journal.begin("run-7/x", {}, { key: "has space" }), "key-invalid-character");
    }],

    ["journal: attempts are numbered and journalled; status comes from the finished ones", async () => {
      const { journal } = await setup();
      assert.equal(await journal.status("never"), null);
      await assert.rejects(() => journal.startAttempt("never"), "action-unknown");
      await journal.begin("a", { x: 1 });
      assert.equal(await journal.status("a"), "pending");
      const one = await journal.startAttempt("a");
      const two = await journal.startAttempt("a");
      assert.equal(one.number, 1);
      assert.equal(two.number, 2);
      assert.ok(UUID_V4.test(one.attemptId) && one.attemptId !== two.attemptId, "random attempt ids");
      await journal.finishAttempt("a", 1, { kind: "timeout" });
      assert.equal(await journal.status("a"), "pending", "a timeout decides nothing");
      await journal.finishAttempt("a", 2, { kind: "response", status: 409, problemType: PROBLEMS + "outcome-uncertain" });
      assert.equal(await journal.status("a"), "unknown");
      const three = await journal.startAttempt("a");
      await journal.finishAttempt("a", three.number, { kind: "response", status: 503 });
      assert.equal(await journal.status("a"), "unknown", "a later retryable failure never clears unknown");
      const four = await journal.startAttempt("a");
      assert.equal(await journal.status("a"), "unknown", "an unfinished attempt counts for nothing");
      await journal.finishAttempt("a", four.number, { kind: "response", status: 201 });
      assert.equal(await journal.status("a"), "confirmed", "a later replay of the resolved outcome decides");
      const attempts = await journal.attempts("a");
      assert.equal(attempts.map((x) => x.outcome).join(","), "timeout,409 outcome-uncertain,503,201");
      assert.ok(attempts.every((x) => x.endedAt >= x.startedAt), "start and end times");
      await assert.rejects(() => journal.finishAttempt("a", 9, { kind: "timeout" }), "attempt-unknown");
      await assert.rejects(() => journal.finishAttempt("a", 1, { kind: "maybe" }), "invalid-argument");
    }],

    ["callWithRetry: 503, timeout, 429 then 201: confirmed, one key on every attempt", async () => {
      const { journal } = await setup();
      const { fetch, seen } = scriptedFetch([
        problem(503, "store-unavailable", {}, { "retry-after": "0" }),
        "hang",
        json(429, { error: "slow down" }),
        json(201, { id: "appt_1" }, { location: "/appointments/appt_1" }),
      ]);
      const report = await call(journal, fetch);
      assert.equal(report.status, "confirmed");
      assert.equal(report.httpStatus, 201);
      assert.equal(report.body, '{"id":"appt_1"}');
      assert.equal(report.resumed, false);
      assert.equal(report.attempts.map((a) => a.outcome).join(","), "503 store-unavailable,timeout,429,201");
      assert.equal(report.attempts.map((a) => a.httpStatus).join(","), "503,,429,201");
      assert.equal(seen.length, 4);
      const action = await journal.get("run-42/book");
      for (const [i, request] of seen.entries()) {
        assert.equal(request.headers.get("idempotency-key"), report.idempotencyKey, `attempt ${i + 1}: the journal's key`);
        assert.equal(request.headers.get("idemkit-attempt-id"), report.attempts[i].attemptId);
        assert.equal(request.body, '{"customer_id":"c1","slot_id":"2026-12-01T10:00"}', "canonical JSON body");
        assert.equal(request.headers.get("content-type"), "application/json");
        assert.equal(request.headers.get("authorization"), "Bearer acme");
        assert.equal(request.method, "POST");
        assert.equal(request.redirect, "manual");
      }
      assert.equal(report.idempotencyKey, action.key);
      assert.equal((await journal.attempts("run-42/book")).length, 4);
    }],

    ["callWithRetry: 422 is rejected after exactly one attempt", async () => {
      const { journal } = await setup();
      const { fetch, seen } = scriptedFetch([problem(422, "invalid-appointment"), json(201, {})]);
      const report = await call(journal, fetch);
      assert.equal(report.status, "rejected");
      assert.equal(report.httpStatus, 422);
      assert.equal(seen.length, 1);
      assert.equal(report.attempts.length, 1);
    }],

    ["callWithRetry: 400, 401, 403, 404 and 409 idempotency-key-reused are never retried", async () => {
      for (const respond of [json(400, {}), json(401, {}), json(403, {}), json(404, {}), problem(409, "idempotency-key-reused")]) {
        const { journal } = await setup();
        const { fetch, seen } = scriptedFetch([respond, json(201, {})]);
        const report = await call(journal, fetch);
        assert.equal(report.status, "rejected", `status after ${report.httpStatus}`);
        assert.equal(seen.length, 1, `attempts after ${report.httpStatus}`);
      }
    }],

    ["callWithRetry: 409 outcome-uncertain stops and reports unknown, never confirmed", async () => {
      const { journal } = await setup();
      const { fetch, seen } = scriptedFetch([problem(504, "provider-timeout"), problem(409, "outcome-uncertain", { log_ref: "ab" }), json(201, {})]);
      const report = await call(journal, fetch);
      assert.equal(report.status, "unknown");
      assert.equal(report.httpStatus, 409);
      assert.equal(seen.length, 2, "no attempt after outcome-uncertain");
      assert.equal(await journal.status("run-42/book"), "unknown");
    }],

    ["callWithRetry: 409 request-in-progress with Retry-After waits, then the replay confirms", async () => {
      const { journal } = await setup();
      const { fetch, seen } = scriptedFetch([problem(409, "request-in-progress", {}, { "retry-after": "0" }), json(201, { id: "a" }, { "idempotent-replayed": "true" })]);
      const report = await call(journal, fetch);
      assert.equal(report.status, "confirmed");
      assert.equal(seen.length, 2);
      // A Retry-After longer than maxRetryAfterMs stops the action as pending.
      const { journal: j2 } = await setup();
      const slow = scriptedFetch([json(429, {}, { "retry-after": "120" }), json(201, {})]);
      const stopped = await call(j2, slow.fetch);
      assert.equal(stopped.status, "pending");
      assert.equal(slow.seen.length, 1);
    }],

    ["callWithRetry: 410 response-expired judges by original_status", async () => {
      const { journal } = await setup();
      const { fetch } = scriptedFetch([problem(410, "response-expired", { original_status: 201 })]);
      assert.equal((await call(journal, fetch)).status, "confirmed");
      const { journal: j2 } = await setup();
      assert.equal((await call(j2, scriptedFetch([problem(410, "response-expired")]).fetch)).status, "unknown");
    }],

    ["callWithRetry: retries are bounded; a last timeout leaves the action pending", async () => {
      const { journal } = await setup();
      const { fetch, seen } = scriptedFetch(["hang"]);
      const report = await call(journal, fetch, { maxAttempts: 3, timeoutMs: 30 });
      assert.equal(report.status, "pending");
      assert.equal(report.httpStatus, null);
      assert.equal(report.body, null);
      assert.equal(seen.length, 3);
      assert.equal(report.attempts.map((a) => a.outcome).join(","), "timeout,timeout,timeout");
    }],

    ["callWithRetry: a connection refused before sending is a connect-error, and retried", async () => {
      const { journal } = await setup();
      const refused = () => {
        throw new TypeError("fetch failed", { cause: Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }) });
      };
      const { fetch, seen } = scriptedFetch([refused, json(201, {})]);
      const report = await call(journal, fetch);
      assert.equal(report.attempts.map((a) => a.outcome).join(","), "connect-error,201");
      assert.equal(report.status, "confirmed");
      assert.equal(seen.length, 2);
    }],

    ["callWithRetry: a re-run resumes with the same key; a changed request throws before sending", async () => {
      const { adapter, journal } = await setup();
      // A first run abandoned mid-attempt (its signal aborted): journalled as a timeout.
      const { fetch: never } = scriptedFetch(["hang"]);
      const controller = new AbortController();
      const dying = call(journal, never, { signal: controller.signal, timeoutMs: 10_000 });
      await new Promise((resolve) => setTimeout(resolve, 20));
      controller.abort(new Error("process killed"));
      const err = await assert.rejects(() => dying);
      assert.equal(err.message, "process killed");
      const key = (await journal.get("run-42/book")).key;
      assert.equal(await journal.status("run-42/book"), "pending");
      // The re-run, from a fresh journal object over the same store.
      const { fetch, seen } = scriptedFetch([json(201, { id: "a" }, { "idempotent-replayed": "true" })]);
      const report = await call(createJournal({ adapter }), fetch, { body: { slot_id: "2026-12-01T10:00", customer_id: "c1" } });
      assert.equal(report.resumed, true);
      assert.equal(report.idempotencyKey, key);
      assert.equal(seen[0].headers.get("idempotency-key"), key);
      assert.equal(report.status, "confirmed");
      assert.equal((await journal.attempts("run-42/book")).length, 2, "both runs' attempts are journalled");
      // Another body under the same action id is another action: refused, nothing sent.
      const { fetch: unused, seen: none } = scriptedFetch([json(201, {})]);
      await assert.rejects(() => call(journal, unused, { body: { customer_id: "c2", slot_id: "2026-12-01T10:00" } }), "action-payload-changed");
      await assert.rejects(() => call(journal, unused, { url: "https://api.test/other" }), "action-payload-changed");
      assert.equal(none.length, 0);
      // Rotating credentials go in volatileHeaders: sent, not compared.
      const rotated = scriptedFetch([json(201, {})]);
      const { journal: j2 } = await setup();
      await call(j2, rotated.fetch, { headers: {}, volatileHeaders: { authorization: "Bearer t1" }, actionId: "v" });
      await call(j2, rotated.fetch, { headers: {}, volatileHeaders: { authorization: "Bearer t2" }, actionId: "v" });
      assert.equal(rotated.seen.map((r) => r.headers.get("authorization")).join(","), "Bearer t1,Bearer t2");
      assert.equal(rotated.seen[0].headers.get("idempotency-key"), rotated.seen[1].headers.get("idempotency-key"));
    }],

    ["callWithRetry: credentials given in headers are sent on every attempt but never journalled; a rotated token continues the action", async () => {
      const { journal } = await setup();
      const first = scriptedFetch([json(503, {}), json(201, { id: "a" })]);
      const credentials = { authorization: "Bearer t1", cookie: "session=s1", "proxy-authorization": "Basic p1" };
      const report = await call(journal, first.fetch, { headers: { ...credentials, "x-request-source": "agent" }, actionId: "cred" });
      assert.equal(report.status, "confirmed");
      for (const sent of first.seen) {
        for (const [name, value] of Object.entries(credentials)) assert.equal(sent.headers.get(name), value, name);
        assert.equal(sent.headers.get("x-request-source"), "agent");
      }
      const journalled = JSON.stringify(await journal.get("cred"));
      for (const secret of ["t1", "s1", "p1"]) assert.ok(!journalled.includes(secret), `journalled: ${journalled}`);
      assert.ok(journalled.includes("x-request-source"), journalled);
      const rotated = scriptedFetch([json(201, { id: "a" }, { "idempotent-replayed": "true" })]);
      const again = await call(journal, rotated.fetch, { headers: { authorization: "Bearer t2", "x-request-source": "agent" }, actionId: "cred" });
      assert.equal(again.resumed, true);
      assert.equal(again.idempotencyKey, report.idempotencyKey);
      assert.equal(rotated.seen[0].headers.get("authorization"), "Bearer t2");
    }],

    ["callWithRetry: a chosen key holding ',' is sent quoted, so the server reads one key, not two folded lines", async () => {
      const { journal } = await setup();
      const { fetch, seen } = scriptedFetch([json(201, {})]);
      const report = await call(journal, fetch, { key: "a,b", actionId: "comma" });
      assert.equal(report.idempotencyKey, "a,b");
      assert.equal(seen[0].headers.get("idempotency-key"), '"a,b"');
      assert.equal(idemkit.parseKey(seen[0].headers.get("idempotency-key")), "a,b");
      const plain = scriptedFetch([json(201, {})]);
      await call(journal, plain.fetch, { key: "order-9", actionId: "plain" });
      assert.equal(plain.seen[0].headers.get("idempotency-key"), "order-9", "bare when bare is unambiguous");
    }],

    ["callWithRetry: refuses an Idempotency-Key header, a relative URL, a bad policy and a fetch that returns no Response", async () => {
      const { journal } = await setup();
      const { fetch, seen } = scriptedFetch([json(201, {})]);
      await assert.rejects(() => call(journal, fetch, { headers: { "Idempotency-Key": "mine" } }), "invalid-argument");
      await assert.rejects(() => call(journal, fetch, { url: "/appointments" }), "invalid-argument");
      await assert.rejects(() => call(journal, fetch, { maxAttempts: 0 }), "invalid-argument");
      await assert.rejects(() => call(journal, fetch, { baseDelayMs: -1 }), "invalid-argument");
      assert.equal(seen.length, 0);
      assert.equal(await journal.get("run-42/book"), null, "nothing was begun");
      // A custom fetch that does not resolve to a Response is a bug, not a network failure.
      await assert.rejects(() => call(journal, async () => ({ ok: true })), "invalid-argument");
      assert.equal(await journal.status("run-42/book"), "pending", "the attempt stays unfinished");
    }],

    ["decideRetry and classifyAttempt are core's rules", async () => {
      const { decideRetry, classifyAttempt } = idemkit;
      const response = (status, problemType = null, retryAfterMs = null) => ({ kind: "response", status, problemType, retryAfterMs });
      assert.equal(classifyAttempt({ kind: "timeout" }), "retryable");
      assert.equal(classifyAttempt(response(409, PROBLEMS + "request-in-progress")), "retryable");
      assert.equal(classifyAttempt(response(409, "outcome-uncertain")), "uncertain");
      assert.equal(classifyAttempt(response(425)), "retryable");
      assert.equal(classifyAttempt(response(302)), "rejected");
      // Full jitter: random mod (ceiling + 1); the ceiling doubles per attempt up to the cap.
      assert.equal(decideRetry(3, { kind: "timeout" }, { baseDelayMs: 100, maxAttempts: 10 }, 1000n).delayMs, 1000 % 401);
      const max = 2n ** 64n - 1n;
      assert.equal(decideRetry(9, { kind: "timeout" }, { baseDelayMs: 100, maxDelayMs: 1000, maxAttempts: 10 }, max).delayMs, Number(max % 1001n));
      assert.equal(decideRetry(1, response(429, null, 3000), {}, 0n).delayMs, 3000);
      const stop = decideRetry(5, { kind: "timeout" });
      assert.equal(stop.retry, false);
      assert.equal(stop.status, "pending");
      assert.equal(decideRetry(1, response(422)).status, "rejected");
    }],
  ];
}
