// The conformance suite: docs/architecture.md's HTTP contract and the record life cycle, run
// unchanged against every adapter in every runtime (Node, Deno, Bun, workerd).
// Time is virtual (the `clock` option), so lease and window expiry are exact.
import { assert } from "./harness.js";

const T0 = 1_700_000_000_000;
const SECOND = 1000;

/**
 * @param {typeof import("idemkit")} idemkit the package as imported in this runtime
 * @param {() => Promise<import("idemkit").Adapter> | import("idemkit").Adapter} makeAdapter a fresh, empty adapter per case
 * @returns {[string, () => Promise<void>][]}
 */
export function conformanceCases(idemkit, makeAdapter) {
  const { createIdempotency, IdemkitError } = idemkit;

  async function setup(options = {}) {
    const adapter = options.adapter ?? (await makeAdapter());
    const clock = { now: T0 };
    const idem = createIdempotency({
      adapter,
      operation: options.operation ?? "payments.capture",
      effect: options.effect ?? "external",
      tenant: options.tenant ?? ((request) => request.headers.get("x-tenant")),
      policy: options.policy,
      fingerprint: options.fingerprint,
      maxStoredResponseBytes: options.maxStoredResponseBytes,
      replayedHeaders: options.replayedHeaders,
      dispatchesOnlyThroughSteps: options.dispatchesOnlyThroughSteps,
      onDisconnect: options.onDisconnect,
      clock: () => clock.now,
    });
    const counter = { runs: 0 };
    const handler = async (request, execution) => {
      counter.runs++;
      const body = await request.json();
      if (options.respond) return options.respond(body, counter.runs, execution);
      return Response.json(
        { id: `pay_${counter.runs}`, amount: body.amount },
        { status: 201, headers: { location: `/payments/pay_${counter.runs}`, "set-cookie": "session=secret" } },
      );
    };
    return { adapter, idem, clock, counter, handler };
  }

  function request(key, body = { amount: 100 }, tenant = "acme", target = "/payments", method = "POST") {
    const headers = { "content-type": "application/json" };
    if (key !== undefined) headers["idempotency-key"] = key;
    if (tenant !== null) headers["x-tenant"] = tenant;
    return new Request(`https://api.test${target}`, {
      method,
      headers,
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
  }

  /**
   * A handler whose provider call follows the request's signal, as `fetch(url, {
   * signal: request.signal })` does: `called` resolves to that signal once the
   * call is made (again after each `answer`), `answer()` lets the provider reply.
   */
  function providerCall() {
    let runs = 0;
    let arrived;
    let answer;
    const next = () => {
      provider.called = new Promise((resolve) => (arrived = resolve));
      provider.replied = new Promise((resolve) => (answer = resolve));
    };
    const provider = {
      runs: () => runs,
      answer: () => {
        const reply = answer;
        next();
        reply();
      },
      handler: async (req) => {
        runs++;
        const text = await req.text();
        const replied = provider.replied;
        const signal = req.signal;
        arrived(signal);
        await new Promise((resolve, reject) => {
          if (signal.aborted) return reject(signal.reason);
          signal.addEventListener("abort", () => reject(signal.reason), { once: true });
          replied.then(resolve);
        });
        return Response.json({ id: `pay_${runs}`, bytes: text.length }, { status: 201 });
      },
    };
    next();
    return provider;
  }

  /**
   * Sends `req` with a signal of the client's, waits for the handler's provider
   * call, then hangs up. The handler's request signal at that moment, and the
   * answer still to come.
   */
  async function hangUpDuring(idem, provider, req) {
    const client = new AbortController();
    const answer = idem.handle(new Request(req, { signal: client.signal }), provider.handler);
    const signal = await provider.called;
    client.abort();
    return { answer, signal };
  }

  async function problemOf(response, status, name) {
    assert.equal(response.status, status, `status of ${name}`);
    assert.equal(response.headers.get("content-type"), "application/problem+json");
    const body = await response.json();
    assert.equal(body.type, `https://idemkit.dev/problems/${name}`);
    assert.equal(body.status, status);
    assert.ok(typeof body.title === "string" && typeof body.detail === "string", "title and detail");
    return body;
  }

  const claimInput = (key = "k-1", body = '{"amount":100}', tenant = "acme") => ({ tenant, key, body });

  return [
    ["missing key: 400 missing-idempotency-key, nothing executed", async () => {
      const { idem, counter, handler } = await setup();
      await problemOf(await idem.handle(request(undefined), handler), 400, "missing-idempotency-key");
      assert.equal(counter.runs, 0);
    }],

    ["malformed key: 400 invalid-idempotency-key with the core's code", async () => {
      const { idem, counter, handler } = await setup();
      for (const [key, code] of [["has space", "key-invalid-character"], ["x".repeat(256), "key-too-long"], ['""', "key-empty"], ['"abc', "key-unterminated-string"], ["a,b", "key-bare-comma"], ["a, b", "key-bare-comma"]]) {
        const body = await problemOf(await idem.handle(request(key), handler), 400, "invalid-idempotency-key");
        assert.equal(body.code, code, `code for ${key.slice(0, 10)}`);
      }
      assert.equal(counter.runs, 0);
    }],

    ["a quoted key may hold a comma: it executes once and replays", async () => {
      const { idem, counter, handler } = await setup();
      assert.equal((await idem.handle(request('"a,b"'), handler)).status, 201);
      const again = await idem.handle(request('"a,b"'), handler);
      assert.equal(again.headers.get("idempotent-replayed"), "true");
      assert.equal(counter.runs, 1);
    }],

    ["no tenant: 401 unauthenticated, nothing executed", async () => {
      const { idem, counter, handler } = await setup();
      await problemOf(await idem.handle(request("k-1", undefined, null), handler), 401, "unauthenticated");
      assert.equal(counter.runs, 0);
    }],

    ["first request executes; a retry replays it with Idempotent-Replayed: true", async () => {
      const { idem, counter, handler, clock } = await setup();
      const first = await idem.handle(request("k-1"), handler);
      assert.equal(first.status, 201);
      assert.equal(first.headers.get("idempotent-replayed"), null);
      const firstBody = await first.text();
      clock.now += 60 * SECOND;
      const again = await idem.handle(request("k-1"), handler);
      assert.equal(again.status, 201);
      assert.equal(again.headers.get("idempotent-replayed"), "true");
      assert.equal(again.headers.get("location"), "/payments/pay_1");
      assert.equal(again.headers.get("set-cookie"), null, "set-cookie is never replayed");
      assert.equal(await again.text(), firstBody);
      assert.equal(counter.runs, 1);
    }],

    ["quoted and bare spellings of a key are one operation; keys are case-sensitive", async () => {
      const { idem, counter, handler } = await setup();
      await idem.handle(request("Order-7"), handler);
      const quoted = await idem.handle(request('"Order-7"'), handler);
      assert.equal(quoted.headers.get("idempotent-replayed"), "true");
      const lower = await idem.handle(request("order-7"), handler);
      assert.equal(lower.headers.get("idempotent-replayed"), null);
      assert.equal(counter.runs, 2);
    }],

    ["equal JSON values are one request: order, whitespace and number spelling don't matter", async () => {
      const { idem, counter, handler } = await setup();
      await idem.handle(request("k-1", '{"amount":100,"currency":"EUR"}'), handler);
      const same = await idem.handle(request("k-1", '{ "currency" : "\\u0045UR", "amount": 1.00e2 }'), handler);
      assert.equal(same.headers.get("idempotent-replayed"), "true");
      assert.equal(counter.runs, 1);
    }],

    ["changed payload: 422 idempotency-key-reused, nothing executed or overwritten", async () => {
      const { idem, counter, handler } = await setup();
      await idem.handle(request("k-1", { amount: 100 }), handler);
      await problemOf(await idem.handle(request("k-1", { amount: 999 }), handler), 422, "idempotency-key-reused");
      const original = await idem.handle(request("k-1", { amount: 100 }), handler);
      assert.equal(original.headers.get("idempotent-replayed"), "true");
      assert.equal((await original.json()).amount, 100);
      assert.equal(counter.runs, 1);
    }],

    ["same key and body to another path, query or method: 422, nothing executed", async () => {
      const { idem, counter, handler } = await setup();
      const to = (target, method = "POST") => request("k-1", { amount: 100 }, "acme", target, method);
      assert.equal((await idem.handle(to("/accounts/A/withdraw?currency=EUR"), handler)).status, 201);
      for (const [target, method] of [["/accounts/B/withdraw?currency=EUR"], ["/accounts/A/withdraw?currency=USD"], ["/accounts/A/withdraw"], ["/accounts/A/withdraw?currency=EUR", "PUT"]]) {
        await problemOf(await idem.handle(to(target, method), handler), 422, "idempotency-key-reused");
      }
      assert.equal(counter.runs, 1, "B's withdrawal is refused, never answered with A's");
      const replay = await idem.handle(to("/accounts/A/withdraw?currency=EUR"), handler);
      assert.equal(replay.headers.get("idempotent-replayed"), "true");
      assert.equal(counter.runs, 1);
    }],

    ["query pairs are decoded and sorted by name; repeated names keep their order", async () => {
      const { idem, counter, handler } = await setup();
      const to = (target) => request("k-1", { amount: 100 }, "acme", target);
      await idem.handle(to("/payments?b=2&a=1&a=3&q=x+y"), handler);
      const same = await idem.handle(to("/payments?a=1&q=x%20y&b=2&a=3"), handler);
      assert.equal(same.headers.get("idempotent-replayed"), "true");
      await problemOf(await idem.handle(to("/payments?a=3&a=1&b=2&q=x+y"), handler), 422, "idempotency-key-reused");
      assert.equal(counter.runs, 1);
    }],

    ["a route leaves named query parameters or the whole query out", async () => {
      const named = await setup({ fingerprint: { ignoreQueryParams: ["utm_source"] } });
      const to = (target, key = "k-1") => request(key, { amount: 100 }, "acme", target);
      await named.idem.handle(to("/payments?utm_source=mail&id=7"), named.handler);
      const again = await named.idem.handle(to("/payments?id=7&utm_source=ad"), named.handler);
      assert.equal(again.headers.get("idempotent-replayed"), "true");
      await problemOf(await named.idem.handle(to("/payments?id=8"), named.handler), 422, "idempotency-key-reused");
      assert.equal(named.counter.runs, 1);
      const whole = await setup({ fingerprint: { ignoreQuery: true } });
      await whole.idem.handle(to("/payments?id=7"), whole.handler);
      const any = await whole.idem.handle(to("/payments?id=8&x=%zz"), whole.handler);
      assert.equal(any.headers.get("idempotent-replayed"), "true");
      await problemOf(await whole.idem.handle(to("/refunds?id=7"), whole.handler), 422, "idempotency-key-reused");
      assert.equal(whole.counter.runs, 1, "the path still counts");
    }],

    ["a record written before the request line counted (scheme 1) keeps replaying after the upgrade", async () => {
      const { idem, counter, handler } = await setup();
      // A claim without a request line is what the handler wrote before scheme 2.
      const held = await idem.claim(claimInput("k-1", '{"amount":100}'));
      assert.equal(held.outcome, "execute");
      await idem.complete(held, { status: 201, headers: { location: "/payments/pay_0" }, body: '{"id":"pay_0"}' });
      assert.equal((await idem.inspect(claimInput("k-1"))).fingerprintScheme, 1);
      const retry = await idem.handle(request("k-1", { amount: 100 }, "acme", "/payments?any=thing"), handler);
      assert.equal(retry.status, 201);
      assert.equal(retry.headers.get("idempotent-replayed"), "true");
      assert.equal(await retry.text(), '{"id":"pay_0"}');
      await problemOf(await idem.handle(request("k-1", { amount: 5 }), handler), 422, "idempotency-key-reused");
      assert.equal(counter.runs, 0);
      // A new key is written under scheme 2.
      await idem.handle(request("k-2"), handler);
      assert.equal((await idem.inspect(claimInput("k-2"))).fingerprintScheme, 2);
    }],

    ["a reused key is refused in every state, even while running", async () => {
      const { idem, counter, handler } = await setup();
      await idem.claim(claimInput("k-1", '{"amount":100}'));
      await problemOf(await idem.handle(request("k-1", { amount: 5 }), handler), 422, "idempotency-key-reused");
      assert.equal(counter.runs, 0);
    }],

    ["mismatch status is configurable: 409", async () => {
      const { idem, handler } = await setup({ policy: { mismatchStatus: 409 } });
      await idem.handle(request("k-1", { amount: 100 }), handler);
      await problemOf(await idem.handle(request("k-1", { amount: 1 }), handler), 409, "idempotency-key-reused");
    }],

    ["excluded fields do not count", async () => {
      const { idem, counter, handler } = await setup({ fingerprint: { exclude: ["/request_id"] } });
      await idem.handle(request("k-1", { amount: 100, request_id: "r-1" }), handler);
      const retry = await idem.handle(request("k-1", { amount: 100, request_id: "r-2" }), handler);
      assert.equal(retry.headers.get("idempotent-replayed"), "true");
      assert.equal(counter.runs, 1);
    }],

    ["a body that is not I-JSON: 400 invalid-request-body with the core's code, nothing executed", async () => {
      const { idem, counter, handler } = await setup();
      const body = await problemOf(await idem.handle(request("k-1", '{"a":1,"a":2}'), handler), 400, "invalid-request-body");
      assert.equal(body.code, "json-duplicate-member-name");
      assert.equal(counter.runs, 0);
    }],

    ["a body over maxBodyBytes: 413 body-too-large, nothing executed or stored", async () => {
      const adapter = await makeAdapter();
      const { idem, counter, handler } = await setup({ adapter });
      const small = createIdempotency({ adapter, operation: "payments.capture", effect: "external", tenant: () => "acme", maxBodyBytes: 64 });
      const body = await problemOf(await small.handle(request("k-big", { amount: 1, pad: "x".repeat(100) }), handler), 413, "body-too-large");
      assert.equal(body.limit, 64);
      assert.equal(counter.runs, 0);
      assert.equal(await idem.inspect({ tenant: "acme", key: "k-big" }), null);
    }],

    ["same key still running: 409 request-in-progress with Retry-After", async () => {
      const { idem, counter, handler, clock } = await setup();
      const held = await idem.claim(claimInput());
      assert.equal(held.outcome, "execute");
      clock.now += 12_500;
      const response = await idem.handle(request("k-1"), handler);
      await problemOf(response, 409, "request-in-progress");
      assert.equal(response.headers.get("retry-after"), "18");
      assert.equal(counter.runs, 0);
    }],

    ["the first claim gets token 1, attempt 1 and a lease", async () => {
      const { idem } = await setup();
      const held = await idem.claim(claimInput());
      assert.equal(held.outcome, "execute");
      assert.equal(held.token, 1n);
      assert.equal(held.attempt, 1);
      assert.equal(held.leaseExpiresAt, T0 + 30 * SECOND);
      const record = await idem.inspect({ tenant: "acme", key: "k-1" });
      assert.equal(record.state, "running");
      assert.equal(record.owner, held.owner);
    }],

    ["outcome unknown: 409 outcome-uncertain with the log reference, never re-executed", async () => {
      const { idem, counter, handler, clock } = await setup();
      const held = await idem.claim(claimInput());
      await idem.markUnknown(held, "timeout talking to the bank");
      for (let i = 0; i < 3; i++) {
        clock.now += 3600 * SECOND;
        const body = await problemOf(await idem.handle(request("k-1"), handler), 409, "outcome-uncertain");
        assert.equal(body.log_ref, held.logRef);
      }
      assert.equal(counter.runs, 0);
    }],

    ["external lease expiry: uncertain; resolve(applied) then replays that response", async () => {
      const { idem, counter, handler, clock } = await setup({ effect: "external" });
      await idem.claim(claimInput());
      clock.now += 31 * SECOND;
      await problemOf(await idem.handle(request("k-1"), handler), 409, "outcome-uncertain");
      assert.equal((await idem.inspect({ tenant: "acme", key: "k-1" })).state, "unknown");
      const resolved = await idem.resolve({ tenant: "acme", key: "k-1" }, {
        status: 201,
        headers: { "content-type": "application/json" },
        body: '{"id":"pay_bank"}',
        resourceRef: "pay_bank",
      });
      assert.equal(resolved.state, "completed");
      const replay = await idem.handle(request("k-1"), handler);
      assert.equal(replay.status, 201);
      assert.equal(replay.headers.get("idempotent-replayed"), "true");
      assert.equal(await replay.text(), '{"id":"pay_bank"}');
      assert.equal(counter.runs, 0);
    }],

    ["resolve(not applied) releases: the next retry executes as attempt 2 with token 2", async () => {
      const { idem, counter, handler } = await setup();
      const held = await idem.claim(claimInput());
      await idem.markUnknown(held, "crashed");
      const resolved = await idem.resolve({ tenant: "acme", key: "k-1" }, null);
      assert.equal(resolved.state, "released");
      const again = await idem.claim(claimInput());
      assert.equal(again.outcome, "execute");
      assert.equal(again.token, 2n);
      assert.equal(again.attempt, 2);
      assert.equal(counter.runs, 0);
    }],

    ["resolve refuses a record that is not unresolved", async () => {
      const { idem, handler } = await setup();
      await idem.handle(request("k-1"), handler);
      await assert.rejects(idem.resolve({ tenant: "acme", key: "k-1" }, null), "wrong-state");
    }],

    ["local lease expiry: taken over with token 2; the old token can no longer write", async () => {
      const { idem, clock } = await setup({ effect: "local" });
      const first = await idem.claim(claimInput());
      clock.now += 31 * SECOND;
      const second = await idem.claim(claimInput());
      assert.equal(second.outcome, "execute");
      assert.equal(second.token, 2n);
      await assert.rejects(idem.complete(first, { status: 201, body: "late" }), "stale-token");
      await idem.complete(second, { status: 201, body: "winner" });
      const replay = await idem.claim(claimInput());
      assert.equal(replay.outcome, "replay");
      assert.equal(new TextDecoder().decode(replay.response.body), "winner");
    }],

    ["renew keeps a long attempt's lease", async () => {
      const { idem, clock } = await setup({ effect: "local" });
      const held = await idem.claim(claimInput());
      clock.now += 25 * SECOND;
      await idem.renew(held);
      clock.now += 25 * SECOND;
      const other = await idem.claim(claimInput());
      assert.equal(other.outcome, "inFlight");
      await idem.complete(held, { status: 200, body: "done" });
    }],

    ["a slow handler keeps its lease: a retry meanwhile gets 409 in progress, not a second run", async () => {
      // Real time: the lease (1 s) would expire while the handler runs (2.5 s).
      const idem = createIdempotency({
        adapter: await makeAdapter(),
        operation: "reports.generate",
        effect: "local",
        tenant: () => "acme",
        policy: { leaseMs: 1000 },
      });
      let runs = 0;
      const slow = async () => {
        runs++;
        await new Promise((resolve) => setTimeout(resolve, 2500));
        return new Response("report", { status: 201 });
      };
      const first = idem.handle(request("k-slow"), slow);
      await new Promise((resolve) => setTimeout(resolve, 1600));
      const retry = await idem.handle(request("k-slow"), slow);
      await problemOf(retry, 409, "request-in-progress");
      assert.equal((await first).status, 201);
      const replay = await idem.handle(request("k-slow"), slow);
      assert.equal(replay.headers.get("idempotent-replayed"), "true");
      assert.equal(runs, 1);
    }],

    ["steps: a takeover reuses the provider key persisted before dispatch, and skips done steps", async () => {
      const { idem, clock } = await setup({ effect: "local" });
      const first = await idem.claim(claimInput());
      const charge = await idem.beginStep(first, "charge", "pk-first");
      assert.equal(charge.dispatch, true);
      assert.equal(charge.providerKey, "pk-first");
      clock.now += 31 * SECOND; // the first worker died after dispatching the charge
      const second = await idem.claim(claimInput());
      assert.equal(second.outcome, "execute");
      assert.equal(second.steps.length, 1);
      assert.equal(second.steps[0].providerKey, "pk-first");
      const again = await idem.beginStep(second, "charge", "pk-second");
      assert.equal(again.providerKey, "pk-first", "the persisted key, never a new one");
      await assert.rejects(idem.beginStep(first, "notify", "pk-x"), "stale-token");
      // A step the fenced worker had begun: answered from its own record, that
      // would be "dispatch again" with nothing written (so nothing checked).
      await assert.rejects(idem.beginStep(first, "charge", "pk-first"), "stale-token");
      await idem.completeStep(second, "charge", "ch_81");
      const done = await idem.beginStep(second, "charge", "pk-third");
      assert.equal(done.dispatch, false);
      assert.equal(done.providerRef, "ch_81");
      await assert.rejects(idem.completeStep(second, "refund", "r_1"), "unknown-step");
      await idem.complete(second, { status: 201, body: "charged" });
      const record = await idem.inspect({ tenant: "acme", key: "k-1" });
      assert.equal(record.steps[0].state, "done");
      assert.equal(record.steps[0].providerRef, "ch_81");
    }],

    ["release lets a retry execute again", async () => {
      const { idem } = await setup();
      const held = await idem.claim(claimInput());
      const released = await idem.release(held);
      assert.equal(released.state, "released");
      const again = await idem.claim(claimInput());
      assert.equal(again.outcome, "execute");
      assert.equal(again.attempt, 2);
    }],

    ["5xx with a local effect is released and retried", async () => {
      const { idem, counter, handler } = await setup({
        effect: "local",
        respond: (_, runs) => (runs === 1 ? new Response("db down", { status: 503 }) : Response.json({ ok: true }, { status: 201 })),
      });
      assert.equal((await idem.handle(request("k-1"), handler)).status, 503);
      const retry = await idem.handle(request("k-1"), handler);
      assert.equal(retry.status, 201);
      assert.equal(retry.headers.get("idempotent-replayed"), null);
      assert.equal(counter.runs, 2);
    }],

    ["5xx with an external effect becomes unknown: 409 outcome-uncertain", async () => {
      const { idem, counter, handler } = await setup({
        effect: "external",
        respond: () => new Response("gateway timeout", { status: 504 }),
      });
      assert.equal((await idem.handle(request("k-1"), handler)).status, 504);
      await problemOf(await idem.handle(request("k-1"), handler), 409, "outcome-uncertain");
      assert.equal(counter.runs, 1);
    }],

    ["408/409/425/429 on an external route run once and the retry is uncertain", async () => {
      for (const status of [408, 409, 425, 429]) {
        const { idem, counter, handler } = await setup({ respond: () => new Response(`later ${status}`, { status }) });
        assert.equal((await idem.handle(request("k-1"), handler)).status, status);
        const retry = await problemOf(await idem.handle(request("k-1"), handler), 409, "outcome-uncertain");
        assert.ok(typeof retry.log_ref === "string");
        assert.equal(counter.runs, 1, `${status}: never a second charge`);
      }
    }],

    ["408/409/425/429 on an external route run again when the handler said nothing was dispatched", async () => {
      for (const status of [408, 409, 425, 429, 503]) {
        const { idem, counter, handler } = await setup({
          respond: (_, runs, execution) => {
            execution.nothingDispatched();
            return new Response(`later ${runs}`, { status });
          },
        });
        assert.equal((await idem.handle(request("k-1"), handler)).status, status);
        const retry = await idem.handle(request("k-1"), handler);
        assert.equal(retry.status, status);
        assert.equal(await retry.text(), "later 2", "executed again");
        assert.equal(counter.runs, 2, String(status));
      }
    }],

    ["one route records the same status by what each attempt declared, attempt after attempt", async () => {
      const { idem, counter, handler } = await setup({
        respond: (body, runs, execution) => {
          if (body.amount === 0) execution.nothingDispatched();
          return new Response(`later ${runs}`, { status: 503 });
        },
      });
      // Nothing dispatched: released, so the retry runs again.
      await idem.handle(request("k-1", { amount: 0 }), handler);
      assert.equal(await (await idem.handle(request("k-1", { amount: 0 }), handler)).text(), "later 2");
      // The same status without the declaration: the outcome is unknown, the retry not run.
      await idem.handle(request("k-2", { amount: 5 }), handler);
      const uncertain = await idem.handle(request("k-2", { amount: 5 }), handler);
      assert.equal(uncertain.status, 409);
      assert.ok((await uncertain.text()).includes("outcome-uncertain"));
      // And declared again: released again.
      await idem.handle(request("k-3", { amount: 0 }), handler);
      assert.equal(await (await idem.handle(request("k-3", { amount: 0 }), handler)).text(), "later 5");
      assert.equal(counter.runs, 5);
    }],

    ["a tenant function may answer with a promise; one that resolves to null is 401", async () => {
      const { idem, counter, handler } = await setup({
        tenant: async (request) => {
          await new Promise((resolve) => setTimeout(resolve, 1));
          return request.headers.get("x-tenant");
        },
      });
      assert.equal((await idem.handle(request("k-1"), handler)).status, 201);
      const replay = await idem.handle(request("k-1"), handler);
      assert.equal(replay.headers.get("idempotent-replayed"), "true");
      assert.equal((await idem.handle(request("k-1", undefined, null), handler)).status, 401);
      assert.equal(counter.runs, 1);
    }],

    ["a route dispatching only through steps runs again when no step was begun, not after a begun one", async () => {
      const noStep = await setup({ dispatchesOnlyThroughSteps: true, respond: () => new Response(null, { status: 429 }) });
      await noStep.idem.handle(request("k-1"), noStep.handler);
      assert.equal((await noStep.idem.handle(request("k-1"), noStep.handler)).status, 429);
      assert.equal(noStep.counter.runs, 2, "no step begun: nothing dispatched");

      const begun = await setup({
        dispatchesOnlyThroughSteps: true,
        respond: async (_, runs, execution) => {
          await execution.beginStep("charge", `pk-${runs}`);
          return new Response(null, { status: 429 });
        },
      });
      await begun.idem.handle(request("k-1"), begun.handler);
      await problemOf(await begun.idem.handle(request("k-1"), begun.handler), 409, "outcome-uncertain");
      assert.equal(begun.counter.runs, 1, "a begun step may have been dispatched");

      const undeclared = await setup({ respond: () => new Response(null, { status: 429 }) });
      await undeclared.idem.handle(request("k-1"), undeclared.handler);
      await problemOf(await undeclared.idem.handle(request("k-1"), undeclared.handler), 409, "outcome-uncertain");
      assert.equal(undeclared.counter.runs, 1, "without the declaration an empty step list proves nothing");
    }],

    ["a 303 on a local route is stored and replayed", async () => {
      const { idem, counter, handler } = await setup({
        effect: "local",
        respond: () => new Response(null, { status: 303, headers: { location: "/payments/pay_1" } }),
      });
      assert.equal((await idem.handle(request("k-1"), handler)).status, 303);
      const replay = await idem.handle(request("k-1"), handler);
      assert.equal(replay.status, 303);
      assert.equal(replay.headers.get("location"), "/payments/pay_1");
      assert.equal(replay.headers.get("idempotent-replayed"), "true");
      assert.equal(counter.runs, 1);
    }],

    ["408/409/425/429 on a local route are released, other 4xx are stored (Definitive)", async () => {
      const { idem, counter, handler } = await setup({
        effect: "local",
        respond: (body, runs) => new Response(null, { status: body.amount === 1 ? (runs === 1 ? 429 : 200) : 404 }),
      });
      assert.equal((await idem.handle(request("k-1", { amount: 1 }), handler)).status, 429);
      assert.equal((await idem.handle(request("k-1", { amount: 1 }), handler)).status, 200);
      assert.equal((await idem.handle(request("k-2", { amount: 2 }), handler)).status, 404);
      const replay404 = await idem.handle(request("k-2", { amount: 2 }), handler);
      assert.equal(replay404.status, 404);
      assert.equal(replay404.headers.get("idempotent-replayed"), "true");
      assert.equal(counter.runs, 3);
    }],

    ["StoreEverything stores a 5xx", async () => {
      const { idem, counter, handler } = await setup({
        policy: { store: "everything" },
        respond: () => new Response("boom", { status: 500 }),
      });
      await idem.handle(request("k-1"), handler);
      const replay = await idem.handle(request("k-1"), handler);
      assert.equal(replay.status, 500);
      assert.equal(replay.headers.get("idempotent-replayed"), "true");
      assert.equal(counter.runs, 1);
    }],

    ["a handler that throws: local released (retry executes), external unknown; the error propagates", async () => {
      for (const effect of ["local", "external"]) {
        const { idem } = await setup({ effect });
        let runs = 0;
        const failing = async () => {
          runs++;
          throw new Error("boom");
        };
        await assert.rejects(idem.handle(request("k-1"), failing), undefined);
        const state = (await idem.inspect({ tenant: "acme", key: "k-1" })).state;
        assert.equal(state, effect === "local" ? "released" : "unknown", effect);
        assert.equal(runs, 1);
      }
    }],

    ["replay window over: 410 response-expired with the resource reference, not executed", async () => {
      const { idem, counter, handler, clock } = await setup({ policy: { replayWindowMs: 60 * SECOND } });
      await idem.handle(request("k-1"), handler);
      clock.now += 61 * SECOND;
      const body = await problemOf(await idem.handle(request("k-1"), handler), 410, "response-expired");
      assert.equal(body.original_status, 201);
      assert.equal(body.resource_ref, "/payments/pay_1");
      assert.equal(counter.runs, 1);
    }],

    ["record window over: the key is free again", async () => {
      const { idem, counter, handler, clock } = await setup({ policy: { replayWindowMs: 60 * SECOND, recordWindowMs: 120 * SECOND } });
      await idem.handle(request("k-1"), handler);
      clock.now += 121 * SECOND;
      const again = await idem.handle(request("k-1", { amount: 7 }), handler);
      assert.equal(again.status, 201);
      assert.equal(counter.runs, 2);
    }],

    ["tenants and operations are isolated", async () => {
      const adapter = await makeAdapter();
      const a = await setup({ adapter });
      const b = await setup({ adapter, operation: "refunds.create" });
      await a.idem.handle(request("k-1", { amount: 100 }, "acme"), a.handler);
      const otherTenant = await a.idem.handle(request("k-1", { amount: 5 }, "globex"), a.handler);
      assert.equal(otherTenant.status, 201);
      assert.equal(otherTenant.headers.get("idempotent-replayed"), null);
      const otherOperation = await b.idem.handle(request("k-1", { amount: 5 }, "acme"), b.handler);
      assert.equal(otherOperation.status, 201);
      assert.equal(a.counter.runs + b.counter.runs, 3);
    }],

    ["store unavailable: 503 with Retry-After, never executed without a claim", async () => {
      const healthy = await makeAdapter();
      for (const broken of ["get", "insert"]) {
        const adapter = {
          get: (id) => (broken === "get" ? Promise.reject(new Error("connection refused")) : healthy.get(id)),
          insert: (id, r) => (broken === "insert" ? Promise.reject(new Error("disk full")) : healthy.insert(id, r)),
          update: (id, r, v) => healthy.update(id, r, v),
        };
        const { idem, counter, handler } = await setup({ adapter });
        const response = await idem.handle(request(`k-${broken}`), handler);
        await problemOf(response, 503, "store-unavailable");
        assert.equal(response.headers.get("retry-after"), "1");
        assert.equal(counter.runs, 0, broken);
      }
    }],

    ["an adapter error is not sticky: the request it hit is 503, the next ones are served", async () => {
      // Each adapter method fails once, as a dropped connection or a full disk
      // would, and then works again: the handler keeps no trace of the failure.
      for (const method of ["get", "insert", "update"]) {
        const healthy = await makeAdapter();
        let failures = 0;
        const adapter = { name: `${method} fails once` };
        for (const name of ["get", "insert", "update", "updateWith", "delete", "scan"]) {
          if (typeof healthy[name] !== "function") continue;
          adapter[name] = (...args) => {
            if (name === method && failures > 0) {
              failures--;
              return Promise.reject(new Error(`${name}: disk I/O error`));
            }
            return healthy[name](...args);
          };
        }
        const { idem, counter, handler } = await setup({ adapter, effect: "local" });
        failures = 1;
        const hit = await idem.handle(request("k-hit"), handler);
        if (method === "update") {
          // The completion is retried, so one failure is absorbed: answered and kept.
          assert.equal(hit.status, 201, method);
        } else {
          await problemOf(hit, 503, "store-unavailable");
          assert.equal(counter.runs, 0, `${method}: nothing ran without a claim`);
        }
        // The next request, on the same handler, is served as if nothing happened.
        assert.equal((await idem.handle(request("k-next"), handler)).status, 201, method);
        // The key the failure hit: executed now (it was never claimed) or replayed.
        const retried = await idem.handle(request("k-hit"), handler);
        assert.equal(retried.status, 201, method);
        const replay = await idem.handle(request("k-hit"), handler);
        assert.equal(replay.headers.get("idempotent-replayed"), "true", method);
        assert.equal(counter.runs, 2, `${method}: each key executed once`);
      }
    }],

    ["a completion that cannot be stored is not acknowledged and never released", async () => {
      for (const effect of ["local", "external"]) {
        const healthy = await makeAdapter();
        const adapter = {
          get: (id) => healthy.get(id),
          insert: (id, r) => healthy.insert(id, r),
          update: () => Promise.reject(new Error("write timeout")),
        };
        const { idem, counter, handler } = await setup({ adapter, effect });
        const response = await idem.handle(request("k-1"), handler);
        // Core's one answer for every binding: uncertain, with the reason.
        const body = await problemOf(response, 409, "outcome-uncertain");
        assert.equal(body.code, "outcome-not-recorded");
        assert.equal(body.original_status, 201);
        assert.equal(body.log_ref, idemkit.logRef("acme", "payments.capture", "k-1"));
        assert.equal(response.headers.get("retry-after"), null, "not an invitation to retry");
        assert.equal(counter.runs, 1);
        // Neither recorded nor released: the lease holds the key, the retry is not run.
        const record = await healthy.get(idemkit.recordId("acme", "payments.capture", "k-1"));
        assert.equal(idemkit.decodeRecord(record.record).state, "running", effect);
        const retry = await (await setup({ adapter: healthy, effect })).idem.handle(request("k-1"), handler);
        await problemOf(retry, 409, "request-in-progress");
        assert.equal(counter.runs, 1, effect);
      }
    }],

    ["a completion write that fails once is retried: answered, then replayed", async () => {
      for (const effect of ["local", "external"]) {
        const healthy = await makeAdapter();
        let failures = 1;
        const adapter = {
          get: (id) => healthy.get(id),
          insert: (id, r) => healthy.insert(id, r),
          update: (id, r, v) => (failures-- > 0 ? Promise.reject(new Error("write timeout")) : healthy.update(id, r, v)),
        };
        const { idem, counter, handler } = await setup({ adapter, effect });
        assert.equal((await idem.handle(request("k-1"), handler)).status, 201, effect);
        const replay = await idem.handle(request("k-1"), handler);
        assert.equal(replay.status, 201);
        assert.equal(replay.headers.get("idempotent-replayed"), "true");
        assert.equal(counter.runs, 1, effect);
      }
    }],

    ["a completion that keeps failing leaves the record unknown, never released: the retry is uncertain", async () => {
      for (const effect of ["local", "external"]) {
        const healthy = await makeAdapter();
        let failures = 4; // every try of the completion; the Unknown fallback gets through
        const adapter = {
          get: (id) => healthy.get(id),
          insert: (id, r) => healthy.insert(id, r),
          update: (id, r, v) => (failures-- > 0 ? Promise.reject(new Error("write timeout")) : healthy.update(id, r, v)),
        };
        const { idem, counter, handler } = await setup({ adapter, effect });
        const body = await problemOf(await idem.handle(request("k-1"), handler), 409, "outcome-uncertain");
        assert.equal(body.code, "outcome-not-recorded");
        const record = await healthy.get(idemkit.recordId("acme", "payments.capture", "k-1"));
        assert.equal(idemkit.decodeRecord(record.record).state, "unknown", effect);
        await problemOf(await idem.handle(request("k-1"), handler), 409, "outcome-uncertain");
        assert.equal(counter.runs, 1, `${effect}: never run again`);
      }
    }],

    ["a claim that loses the insert race decides again on the winner's record", async () => {
      const base = await makeAdapter();
      let rival = null;
      const adapter = {
        async get(id) {
          const seen = await base.get(id);
          // Between our read and our write, a rival claims the same key.
          if (rival === null) rival = await rivalIdem.claim(claimInput());
          return seen;
        },
        insert: (id, r) => base.insert(id, r),
        update: (id, r, v) => base.update(id, r, v),
      };
      const rivalIdem = (await setup({ adapter: base })).idem;
      const { idem } = await setup({ adapter });
      const mine = await idem.claim(claimInput());
      assert.equal(rival.outcome, "execute");
      assert.equal(mine.outcome, "inFlight");
    }],

    ["a completion that loses a version race re-reads; the machine keeps the token check", async () => {
      const { idem, adapter, clock } = await setup({ effect: "local" });
      const held = await idem.claim(claimInput());
      await idem.renew(held); // version moves on; `held` tracks it
      clock.now += 1000;
      // A copy of the claim keeps the version it was made at.
      const stale = { ...held };
      await idem.renew(held);
      // `stale` still has the previous version: its CAS fails, it re-reads, and the
      // machine accepts the same token on the fresh record.
      const done = await idem.complete(stale, { status: 201, body: "ok" });
      assert.equal(done.state, "completed");
      assert.ok(adapter !== undefined);
    }],

    ["a response over maxStoredResponseBytes is answered in full once, then 410 response-expired with the resource", async () => {
      const respond = (body, n) => new Response("r".repeat(body.size), { status: 201, headers: { location: `/reports/${n}` } });
      const { idem, counter, handler, clock } = await setup({ maxStoredResponseBytes: 1024, respond });
      const atLimit = await idem.handle(request("k-at", { size: 1024 }), handler);
      assert.equal((await atLimit.text()).length, 1024);
      const replayed = await idem.handle(request("k-at", { size: 1024 }), handler);
      assert.equal(replayed.headers.get("idempotent-replayed"), "true");
      assert.equal((await replayed.text()).length, 1024);

      const big = await idem.handle(request("k-big", { size: 1025 }), handler);
      assert.equal(big.status, 201);
      assert.equal(big.headers.get("location"), "/reports/2");
      assert.equal((await big.text()).length, 1025, "the caller gets the whole response once");
      const record = await idem.inspect({ tenant: "acme", key: "k-big" });
      assert.equal(record.state, "completed");
      assert.equal(record.response.body, null, "recorded without its body");
      assert.equal(record.response.resourceRef, "/reports/2");
      for (const later of [1, 60]) {
        clock.now += later * SECOND;
        const retry = await problemOf(await idem.handle(request("k-big", { size: 1025 }), handler), 410, "response-expired");
        assert.equal(retry.original_status, 201);
        assert.equal(retry.resource_ref, "/reports/2");
      }
      assert.equal(counter.runs, 2, "each key ran once");
    }],

    ["a response too large for the adapter's stored value is answered once, then 410; never a second run", async () => {
      const adapter = await makeAdapter();
      // Adapters over a store that caps a value (Deno KV, Durable Objects, D1) say
      // so in maxRecordBytes; the others hold any body up to maxStoredResponseBytes.
      const capped = adapter.maxRecordBytes !== undefined;
      const size = capped ? adapter.maxRecordBytes + 1 : 100 * 1024;
      const respond = (_, n) => new Response("r".repeat(size), { status: 201, headers: { location: `/reports/${n}` } });
      const { idem, counter, handler } = await setup({ adapter, respond });
      const first = await idem.handle(request("k-huge"), handler);
      assert.equal(first.status, 201);
      assert.equal((await first.text()).length, size);
      const retry = await idem.handle(request("k-huge"), handler);
      if (capped) {
        const problem = await problemOf(retry, 410, "response-expired");
        assert.equal(problem.resource_ref, "/reports/1");
      } else {
        assert.equal(retry.headers.get("idempotent-replayed"), "true");
        assert.equal((await retry.text()).length, size);
      }
      assert.equal(counter.runs, 1);
    }],

    ["corrupt stored bytes are a typed error, answered 503 and never executed", async () => {
      const adapter = {
        get: async () => ({ record: new Uint8Array([1, 255, 255, 255]), version: 1 }),
        insert: async () => null,
        update: async () => null,
      };
      const { idem, counter, handler } = await setup({ adapter });
      await problemOf(await idem.handle(request("k-1"), handler), 503, "store-unavailable");
      assert.equal(counter.runs, 0);
      await assert.rejects(idem.claim(claimInput()), "record-corrupt");
      assert.throws(() => idemkit.decodeRecord(new Uint8Array([9])), "record-unknown-version");
    }],

    // ---- What is stored: an allow list of headers, never a credential, never more
    // of a body than the cap.

    ["replayed headers come from an allow list: a session token in a custom header reaches only the client that asked", async () => {
      const respond = () =>
        new Response('{"id":"pay_1"}', {
          status: 201,
          headers: { "content-type": "application/json", location: "/payments/pay_1", "cache-control": "no-store", "set-cookie": "session=s3cret", "x-session-token": "tok-s3cret", "x-request-cost": "3" },
        });
      const { idem, counter, handler } = await setup({ respond });
      const first = await idem.handle(request("k-headers"), handler);
      assert.equal(first.headers.get("x-session-token"), "tok-s3cret", "the caller gets the whole answer");
      const replay = await idem.handle(request("k-headers"), handler);
      assert.equal(replay.headers.get("idempotent-replayed"), "true");
      for (const kept of ["content-type", "location", "cache-control"]) assert.equal(replay.headers.get(kept), first.headers.get(kept), kept);
      for (const dropped of ["set-cookie", "x-session-token", "x-request-cost"]) assert.equal(replay.headers.get(dropped), null, `${dropped} replayed`);
      const record = await idem.inspect({ tenant: "acme", key: "k-headers" });
      assert.equal(record.response.headers.map(([name]) => name).sort().join(), "cache-control,content-type,location");
      assert.equal(counter.runs, 1);
    }],

    ["replayedHeaders names what a route stores; set-cookie and credentials can never be named", async () => {
      const respond = () => new Response("{}", { status: 201, headers: { "content-type": "application/json", location: "/p/1", "x-request-cost": "3" } });
      const { idem, handler } = await setup({ respond, replayedHeaders: ["Content-Type", "X-Request-Cost"] });
      await idem.handle(request("k-named"), handler);
      const replay = await idem.handle(request("k-named"), handler);
      assert.equal(replay.headers.get("x-request-cost"), "3");
      assert.equal(replay.headers.get("location"), null, "not in the route's list");
      const base = { adapter: await makeAdapter(), operation: "x", effect: "local", tenant: () => "t" };
      for (const never of ["set-cookie", "Cookie", "authorization", "proxy-authorization"]) {
        assert.throws(() => createIdempotency({ ...base, replayedHeaders: ["content-type", never] }), "replayed-header-never-stored", never);
      }
      assert.throws(() => createIdempotency({ ...base, replayedHeaders: ["content-length"] }), "replayed-header-per-transmission");
      assert.throws(() => createIdempotency({ ...base, replayedHeaders: ["bad name"] }), "replayed-header-invalid-name");
      assert.throws(() => createIdempotency({ ...base, replayedHeaders: "content-type" }), "invalid-argument");
    }],

    ["complete answers the view of the record it wrote, field for field as decodeRecord reads it back", async () => {
      const { idem, adapter } = await setup();
      const plain = (view) => JSON.stringify(view, (_, v) => (typeof v === "bigint" ? `${v}n` : v instanceof Uint8Array ? [...v] : v));
      const held = await idem.claim(claimInput("k-view"));
      const done = await idem.complete(held, { status: 201, headers: { "content-type": "application/json", location: "/payments/p1" }, body: '{"id":"p1"}', resourceRef: "/payments/p1" });
      const stored = await adapter.get(idemkit.recordId("acme", "payments.capture", "k-view"));
      assert.equal(plain(done), plain(idemkit.decodeRecord(stored.record)));
      assert.equal(done.state, "completed");
      assert.equal(done.response.resourceRef, "/payments/p1");
      assert.equal(new TextDecoder().decode(done.response.body), '{"id":"p1"}');
    }],

    ["complete and resolve store only the allowed headers: set-cookie never", async () => {
      const { idem } = await setup();
      const secrets = { "content-type": "text/plain", "set-cookie": "session=s3cret", "x-session-token": "tok-s3cret" };
      const held = await idem.claim(claimInput("k-complete"));
      const done = await idem.complete(held, { status: 201, headers: secrets, body: "ok" });
      assert.equal(done.response.headers.map(([name]) => name).join(), "content-type");
      const unsure = await idem.claim(claimInput("k-resolve"));
      await idem.markUnknown(unsure, "timeout");
      const resolved = await idem.resolve({ tenant: "acme", key: "k-resolve" }, { status: 201, headers: secrets, body: "ok" });
      assert.equal(resolved.response.headers.map(([name]) => name).join(), "content-type");
    }],

    ["a corrupt token-floor row is a typed storage error: 503, never an uncaught throw", async () => {
      const adapter = await makeAdapter();
      await adapter.insert("idemkit:token-floor", new TextEncoder().encode("not a number"), { gcDueAt: null });
      const { idem, counter, handler } = await setup({ adapter });
      await problemOf(await idem.handle(request("k-floor"), handler), 503, "store-unavailable");
      assert.equal(counter.runs, 0);
      await assert.rejects(idem.claim(claimInput("k-floor")), "token-floor-corrupt");
    }],

    ["the handler's response body is read through the stored-body cap, never whole", async () => {
      const chunk = new Uint8Array(16 * 1024).fill(114);
      const chunks = 64;
      let pulled = 0;
      const respond = () =>
        new Response(
          new ReadableStream({
            pull(controller) {
              if (pulled === chunks) return controller.close();
              pulled++;
              controller.enqueue(chunk);
            },
          }),
          { status: 201, headers: { location: "/reports/1" } },
        );
      const { idem, counter, handler } = await setup({ respond, maxStoredResponseBytes: 32 * 1024 });
      const first = await idem.handle(request("k-stream"), handler);
      assert.equal(first.status, 201);
      assert.ok(pulled <= 8, `read ${pulled} of ${chunks} chunks before answering: the cap is 2`);
      const record = await idem.inspect({ tenant: "acme", key: "k-stream" });
      assert.equal(record.state, "completed", "recorded before it is answered");
      assert.equal(record.response.body, null, "recorded without its body");
      assert.equal((await first.arrayBuffer()).byteLength, chunks * chunk.length, "the caller gets the whole body, once");
      await problemOf(await idem.handle(request("k-stream"), handler), 410, "response-expired");
      assert.equal(counter.runs, 1);
    }],

    ["handle takes the Workers execution context: a client gone before the answer cannot stop the recording", async () => {
      let release;
      const gate = new Promise((resolve) => (release = resolve));
      const respond = async () => {
        await gate;
        return Response.json({ id: "pay_1" }, { status: 201 });
      };
      const { idem, handler } = await setup({ respond });
      const kept = [];
      const ctx = { waitUntil: (promise) => kept.push(promise) };
      // The client disconnects: nobody awaits what handle returns.
      const handled = idem.handle(request("k-ctx"), handler, ctx).catch(() => {});
      try {
        assert.equal(kept.length, 1, "the handling is registered with waitUntil");
      } finally {
        // The handler finishes either way, so no lease renewal outlives the case.
        release();
        await handled;
      }
      await Promise.all(kept);
      const record = await idem.inspect({ tenant: "acme", key: "k-ctx" });
      assert.equal(record.state, "completed");
      await assert.rejects(idem.handle(request("k-ctx-2"), handler, {}), "invalid-argument");
    }],

    ["a client that hangs up does not abort the handler's request: the outcome is recorded and replayed", async () => {
      const { idem } = await setup();
      const provider = providerCall();
      const first = await hangUpDuring(idem, provider, request("k-gone"));
      assert.equal(first.signal.aborted, false, "the handler's request signal is its own");
      provider.answer();
      assert.equal((await first.answer).status, 201, "the first attempt's answer");
      const retry = await idem.handle(request("k-gone"), provider.handler);
      assert.equal(retry.headers.get("idempotent-replayed"), "true");
      assert.equal(provider.runs(), 1);
      // A request without a body keeps its own signal too.
      const headers = { "idempotency-key": "k-gone-bare", "x-tenant": "acme" };
      const bare = await hangUpDuring(idem, provider, new Request("https://api.test/payments", { method: "POST", headers }));
      assert.equal(bare.signal.aborted, false, "a bodiless request's signal is its own");
      provider.answer();
      assert.equal((await bare.answer).status, 201);
    }],

    ['onDisconnect "cancel": the handler sees the client hang up, and an external attempt it abandons is unknown', async () => {
      const { idem } = await setup({ onDisconnect: "cancel" });
      const provider = providerCall();
      const first = await hangUpDuring(idem, provider, request("k-cancel"));
      assert.equal(first.signal.aborted, true, "the handler's request carries the client's signal");
      await assert.rejects(first.answer, undefined, "the abandoned attempt's error propagates");
      await problemOf(await idem.handle(request("k-cancel"), provider.handler), 409, "outcome-uncertain");
      assert.equal(provider.runs(), 1);
    }],

    // ---- The adapter seam itself: every adapter refuses what a stale caller asks.

    ["adapter seam: a second insert of one id is refused and changes nothing", async () => {
      const adapter = await makeAdapter();
      const first = await adapter.insert("0a01", new Uint8Array([1]), { gcDueAt: null });
      assert.ok(first !== null && first.version !== undefined, "first insert");
      assert.equal(await adapter.insert("0a01", new Uint8Array([2]), { gcDueAt: 5 }), null);
      const read = await adapter.get("0a01");
      assert.bytesEqual(read.record, new Uint8Array([1]));
      assert.equal(read.version, first.version);
      assert.equal((await adapter.scan({ gcDueBefore: 100, limit: 10 })).entries.length, 0, "the refused insert indexed nothing");
    }],

    ["adapter seam: an update with a stale version is refused", async () => {
      const adapter = await makeAdapter();
      const v1 = (await adapter.insert("0a02", new Uint8Array([1]))).version;
      const v2 = (await adapter.update("0a02", new Uint8Array([2]), v1, { gcDueAt: 10 })).version;
      assert.notEqual(v2, v1);
      assert.equal(await adapter.update("0a02", new Uint8Array([3]), v1, { gcDueAt: 20 }), null);
      assert.equal(await adapter.update("0b99", new Uint8Array([3]), v1), null, "no record: refused");
      const read = await adapter.get("0a02");
      assert.bytesEqual(read.record, new Uint8Array([2]));
      assert.equal(read.version, v2);
      const { entries } = await adapter.scan({ gcDueBefore: 100, limit: 10 });
      assert.equal(entries.map((e) => `${e.id}@${e.gcDueAt}`).join(), "0a02@10", "the stale update moved nothing");
    }],

    ["adapter seam: a delete with a stale version is refused; with the current one it deletes", async () => {
      const adapter = await makeAdapter();
      const v1 = (await adapter.insert("0a03", new Uint8Array([1]), { gcDueAt: 1 })).version;
      const v2 = (await adapter.update("0a03", new Uint8Array([2]), v1, { gcDueAt: 2 })).version;
      assert.equal(await adapter.delete("0a03", v1), false, "stale version");
      assert.bytesEqual((await adapter.get("0a03")).record, new Uint8Array([2]));
      assert.equal(await adapter.delete("0a03", v2), true);
      assert.equal(await adapter.get("0a03"), null);
      assert.equal(await adapter.delete("0a03", v2), false, "gone");
      assert.equal((await adapter.scan({ gcDueBefore: 100, limit: 10 })).entries.length, 0, "its GC entry went with it");
      // Deleted, the id is free for a new insert.
      assert.ok((await adapter.insert("0a03", new Uint8Array([3]))) !== null);
    }],

    ["adapter seam: versions never repeat for an id, even after its record was deleted", async () => {
      const adapter = await makeAdapter();
      const seen = new Set();
      for (let life = 0; life < 3; life++) {
        const first = (await adapter.insert("0a04", new Uint8Array([life]))).version;
        const second = (await adapter.update("0a04", new Uint8Array([life, 1]), first)).version;
        for (const v of [first, second]) {
          assert.ok(!seen.has(String(v)), `version ${v} came back after a delete`);
          seen.add(String(v));
        }
        // A holder of the deleted record's version can neither write nor delete the next one.
        assert.equal(await adapter.delete("0a04", second), true);
        const next = (await adapter.insert("0a04", new Uint8Array([9]))).version;
        assert.equal(await adapter.update("0a04", new Uint8Array([8]), first), null, "stale update after delete");
        assert.equal(await adapter.delete("0a04", second), false, "stale delete after delete");
        assert.equal(await adapter.delete("0a04", next), true);
      }
    }],

    ["adapter seam: scan lists due records in (due, id) order, at most limit, paged by its cursor", async () => {
      const adapter = await makeAdapter();
      const due = { "0a": 300, "0b": 100, "0c": 100, "0d": 200, "0e": null, "0f": 500, "1a": 300 };
      for (const [id, gcDueAt] of Object.entries(due)) await adapter.insert(id, new Uint8Array([id.charCodeAt(1)]), { gcDueAt });
      const seen = [];
      const pages = [];
      let after;
      for (;;) {
        const page = await adapter.scan({ gcDueBefore: 300, limit: 2, after });
        assert.ok(page.entries.length <= 2, "bounded");
        pages.push(page.entries.length);
        for (const e of page.entries) {
          seen.push(`${e.id}@${e.gcDueAt}`);
          assert.bytesEqual(e.record, new Uint8Array([e.id.charCodeAt(1)]));
          assert.equal(e.version, (await adapter.get(e.id)).version);
        }
        if (page.next === null) break;
        after = page.next;
      }
      assert.equal(seen.join(), "0b@100,0c@100,0d@200,0a@300,1a@300", "inclusive bound; never-due and later records left out");
      assert.equal(pages.join(), "2,2,1", "next is null on the last page");
      const exact = await adapter.scan({ gcDueBefore: 200, limit: 3 });
      assert.equal(exact.entries.length, 3);
      assert.equal(exact.next, null, "a full page with nothing after it is the last");
      // An update moves a record in the index; never-due takes it out.
      const c = await adapter.get("0c");
      await adapter.update("0c", new Uint8Array([99]), c.version, { gcDueAt: 250 });
      const d = await adapter.get("0d");
      await adapter.update("0d", new Uint8Array([100]), d.version, { gcDueAt: null });
      const moved = await adapter.scan({ gcDueBefore: 1000, limit: 10 });
      assert.equal(moved.entries.map((e) => `${e.id}@${e.gcDueAt}`).join(), "0b@100,0c@250,0a@300,1a@300,0f@500");
    }],

    // ---- GC (docs/architecture.md, retention): only resolved records past their window.

    ["gc deletes records past their record window in bounded batches: 25 records, maxBatch 10", async () => {
      const { idem, clock, counter, handler, adapter } = await setup({ policy: { replayWindowMs: 60 * SECOND, recordWindowMs: 120 * SECOND } });
      for (let i = 0; i < 25; i++) assert.equal((await idem.handle(request(`k-${i}`), handler)).status, 201);
      assert.equal(counter.runs, 25);
      clock.now += 121 * SECOND;
      const passes = [];
      for (let pass = 0; pass < 5; pass++) {
        const report = await idem.gc({ maxBatch: 10 });
        passes.push(`${report.deleted}/${report.pruned}/${report.more}`);
        if (!report.more) break;
      }
      assert.equal(passes.join(" "), "10/0/true 10/0/true 5/0/false", "deleted/pruned/more per pass");
      for (let i = 0; i < 25; i++) {
        assert.equal(await adapter.get(idemkit.recordId("acme", "payments.capture", `k-${i}`)), null, `k-${i} deleted`);
      }
      const idle = await idem.gc({ maxBatch: 10 });
      assert.equal(`${idle.deleted}/${idle.pruned}/${idle.more}`, "0/0/false");
    }],

    ["tokens never repeat for a key after gc deleted its record: the next claim starts above the deleted record's last token", async () => {
      const { idem, clock } = await setup({ effect: "local", policy: { replayWindowMs: 60 * SECOND, recordWindowMs: 120 * SECOND } });
      // Two leases on one record: the first expires and is taken over (token 2), which completes.
      const first = await idem.claim(claimInput("k-t"));
      assert.equal(first.token, 1n);
      clock.now += 31 * SECOND;
      const second = await idem.claim(claimInput("k-t"));
      assert.equal(second.token, 2n);
      await idem.complete(second, { status: 201, body: new TextEncoder().encode("{}") });
      clock.now += 121 * SECOND;
      assert.equal((await idem.gc()).deleted, 1);
      const fresh = await idem.claim(claimInput("k-t"));
      assert.equal(fresh.outcome, "execute");
      assert.equal(fresh.token, 3n, "a worker still holding token 1 or 2 can never present a current token");
      // Another key never had a record deleted: it starts above the floor too (one floor per store).
      assert.ok((await idem.claim(claimInput("k-other"))).token > 2n);
      // The floor row is no record: later passes neither scan nor count it.
      clock.now += 1000 * SECOND;
      const later = await idem.gc();
      assert.equal(later.undecodable, 0);
    }],

    ["gc prunes a completed record's body after its replay window; it still answers 410, never a new execution", async () => {
      const { idem, clock, counter, handler } = await setup({ policy: { replayWindowMs: 60 * SECOND, recordWindowMs: 120 * SECOND } });
      await idem.handle(request("k-1"), handler);
      clock.now += 30 * SECOND;
      const early = await idem.gc();
      assert.equal(`${early.pruned}/${early.deleted}`, "0/0", "inside the replay window nothing is due");
      assert.ok((await idem.inspect(claimInput())).response.body !== null);
      clock.now += 31 * SECOND;
      const report = await idem.gc();
      assert.equal(`${report.pruned}/${report.deleted}/${report.skipped}`, "1/0/0");
      const record = await idem.inspect(claimInput());
      assert.equal(record.state, "completed");
      assert.equal(record.response.body, null, "body pruned");
      assert.equal(record.response.resourceRef, "/payments/pay_1");
      const retry = await problemOf(await idem.handle(request("k-1"), handler), 410, "response-expired");
      assert.equal(retry.resource_ref, "/payments/pay_1");
      assert.equal(counter.runs, 1);
      const again = await idem.gc();
      assert.equal(`${again.pruned}/${again.deleted}`, "0/0", "pruned once; next due at the record window");
      clock.now += 60 * SECOND;
      assert.equal((await idem.gc()).deleted, 1);
      assert.equal(await idem.inspect(claimInput()), null);
    }],

    ["gc never deletes Unknown or Running records, however old; released ones past their window go", async () => {
      const { idem, clock, adapter: store } = await setup({ effect: "external", policy: { replayWindowMs: 60 * SECOND, recordWindowMs: 120 * SECOND } });
      const stale = await idem.claim(claimInput("k-running"));
      const unknown = await idem.claim(claimInput("k-unknown"));
      await idem.markUnknown(unknown, "timeout");
      const released = await idem.claim(claimInput("k-released"));
      await idem.release(released);
      const done = await idem.claim(claimInput("k-done"));
      await idem.complete(done, { status: 201, body: "ok" });
      clock.now += 10 * 365 * 24 * 3600 * SECOND;
      const live = await idem.claim(claimInput("k-live"));
      assert.equal(live.outcome, "execute");
      const report = await idem.gc();
      assert.equal(`${report.deleted}/${report.pruned}/${report.more}`, "2/0/false");
      assert.equal((await idem.inspect(claimInput("k-running"))).state, "running", "an expired lease is unresolved, not garbage");
      assert.equal((await idem.inspect(claimInput("k-unknown"))).state, "unknown");
      assert.equal((await idem.inspect(claimInput("k-live"))).state, "running");
      assert.equal(await idem.inspect(claimInput("k-released")), null);
      assert.equal(await idem.inspect(claimInput("k-done")), null);
      assert.equal((await idem.gc()).deleted, 0);
      // Even indexed as due (as a row from before due times were kept is), core is
      // asked and keeps them; their index entry is corrected to never due.
      for (const key of ["k-running", "k-unknown", "k-live"]) {
        const id = idemkit.recordId("acme", "payments.capture", key);
        const row = await store.get(id);
        assert.ok(await store.update(id, row.record, row.version, { gcDueAt: 0 }), key);
      }
      const forced = await idem.gc();
      assert.equal(`${forced.deleted}/${forced.pruned}/${forced.reindexed}`, "0/0/3");
      assert.equal((await store.scan({ gcDueBefore: clock.now, limit: 10 })).entries.length, 0, "none of them is indexed as due");
      assert.equal((await idem.inspect(claimInput("k-running"))).state, "running");
      assert.equal((await idem.inspect(claimInput("k-unknown"))).state, "unknown");
      assert.equal((await idem.inspect(claimInput("k-live"))).state, "running");
      assert.ok(stale.token !== undefined);
    }],

    ["gc skips a record that changed between scan and delete: the new execution is kept", async () => {
      const base = await makeAdapter();
      const { idem: rival, clock, handler, counter } = await setup({ adapter: base, policy: { replayWindowMs: 60 * SECOND, recordWindowMs: 120 * SECOND } });
      await rival.handle(request("k-1"), handler);
      clock.now += 121 * SECOND;
      let raced = false;
      const adapter = {
        get: (id) => base.get(id),
        insert: (id, r, meta) => base.insert(id, r, meta),
        update: (id, r, v, meta) => base.update(id, r, v, meta),
        delete: (id, v) => base.delete(id, v),
        async scan(options) {
          const page = await base.scan(options);
          // Between GC's scan and its delete, the key (free again) executes anew.
          if (!raced) {
            raced = true;
            assert.equal((await rival.handle(request("k-1", { amount: 7 }), handler)).status, 201);
          }
          return page;
        },
      };
      const gcIdem = createIdempotency({ adapter, operation: "payments.capture", effect: "external", tenant: () => "acme", clock: () => clock.now, policy: { replayWindowMs: 60 * SECOND, recordWindowMs: 120 * SECOND } });
      const report = await gcIdem.gc();
      assert.equal(`${report.deleted}/${report.skipped}`, "0/1");
      const record = await rival.inspect(claimInput());
      assert.equal(record.state, "completed");
      assert.equal(counter.runs, 2);
      const replay = await rival.handle(request("k-1", { amount: 7 }), handler);
      assert.equal(replay.headers.get("idempotent-replayed"), "true", "the new outcome survived GC");
    }],

    ["arguments of the wrong type are refused by name as invalid-argument, and the package goes on working", async () => {
      const { idem } = await setup();
      for (const [what, call] of [
        ["key", () => idem.claim({ tenant: "t1", key: 5, body: "{}" })],
        ["key", () => idem.claim({ tenant: "t1", body: "{}" })],
        ["tenant", () => idem.claim({ tenant: null, key: "k-types", body: "{}" })],
        ["key", () => idem.inspect({ tenant: "t1", key: {} })],
        ["tenant", () => idem.resolve({ tenant: 7, key: "k-types" }, null)],
      ]) {
        const err = await call().then(() => null, (e) => e);
        assert.ok(err instanceof IdemkitError && err.code === "invalid-argument", `${what}: ${err}`);
        assert.ok(err.message.startsWith(`${what} must be a string`), err.message);
      }
      assert.throws(() => idemkit.recordId("t1", "payments.capture", 5), "invalid-argument");
      assert.throws(() => idemkit.logRef(undefined, "payments.capture", "k"), "invalid-argument");
      assert.equal(idemkit.fingerprint("{}", null), idemkit.fingerprint("{}"), "null options are the defaults");
      // A tenant function answering with a number is the server's bug: thrown, not answered.
      const numeric = await setup({ tenant: () => 42 });
      await assert.rejects(numeric.idem.handle(request("k-types"), numeric.handler), "invalid-argument");
      for (const call of [() => idem.claim(undefined), () => idem.inspect(null), () => idem.resolve("k", null)]) {
        const err = await call().then(() => null, (e) => e);
        assert.ok(err instanceof IdemkitError && err.code === "invalid-argument" && err.message.includes("takes an object"), `${err}`);
      }
      const { handler } = await setup();
      await assert.rejects(idem.handle({ url: "/payments" }, handler), "invalid-argument");
      await assert.rejects(idem.handle(request("k-types"), undefined), "invalid-argument");
      // A body refused before the claim starts rejects, as a store failure would: it is not thrown.
      const refused = idem.claim({ tenant: "t1", key: "k-types", body: "{" });
      assert.ok(refused instanceof Promise);
      await assert.rejects(refused, "json-unexpected-end");
      const held = await idem.claim({ tenant: "t1", key: "k-types", body: "{}" });
      assert.equal(held.outcome, "execute");
      await assert.rejects(idem.complete({ ...held, token: "1" }, { status: 200, headers: {}, body: "{}" }), "invalid-argument");
      assert.equal(typeof (await idem.gc(null)).deleted, "number", "gc(null) takes the defaults");
      const done = await idem.complete(held, { status: 200, headers: {}, body: "{}" });
      assert.equal(done.state, "completed");
    }],

    ["bad options are refused when the handler is created", async () => {
      const adapter = await makeAdapter();
      const base = { adapter, operation: "x", effect: "local", tenant: () => "t" };
      assert.throws(() => createIdempotency({ ...base, effect: "sometimes" }), "invalid-argument");
      assert.throws(() => createIdempotency({ ...base, policy: { mismatchStatus: 400 } }), "invalid-argument");
      assert.throws(() => createIdempotency({ ...base, policy: { leaseMs: -1 } }), "invalid-argument");
      assert.throws(() => createIdempotency({ ...base, adapter: {} }), "invalid-argument");
      assert.throws(() => createIdempotency({ ...base, maxStoredResponseBytes: -1 }), "invalid-argument");
      assert.throws(() => createIdempotency({ ...base, onDisconnect: "abort" }), "invalid-argument");
      assert.ok(new IdemkitError("c", "m") instanceof Error);
    }],
  ];
}
