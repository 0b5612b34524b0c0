// Holding a retry of a running key until its answer exists (`Prefer: wait=N`,
// RFC 7240): core says how long a request may wait (`waitFor`: the route's default
// or what it asked, capped by the route's maximum) and how a waiter polls when
// nothing can wake it (`fallbackPoll`); this file holds the request for that long.
//
// How a waiter learns that the record changed depends on the adapter. One whose
// every write goes through this isolate (memory, a Durable Object) offers
// `changed(id, signal)`, resolved by its own writes: the waiter sleeps until the
// first attempt's completion or release wakes it. Any other (D1, SQLite, Deno KV,
// a wrapper) is read again on core's fallback schedule: 50 ms, doubling, at most
// 1 s apart. Either way a waiter also reads again when the first attempt's lease
// runs out (the in-flight answer's Retry-After), so an attempt that died is taken
// over as any retry would take it over. Each read is a claim: core decides again,
// exactly as for a new retry.
import * as wasm from "./idemkit_wasm.js";
import { IdemkitError, wasmCall } from "./errors.js";

/**
 * The wait `request` gets on a route: `{ durationMs, preferenceApplied }`, from the
 * first `wait` among its `Prefer` header lines and the route's `rule`
 * (`{ waitMs, maxWaitMs }`).
 */
export function waitOf(request, rule) {
  const prefer = request.headers.get("prefer");
  const requested = prefer === null ? undefined : wasm.preferWait([prefer]);
  return wasmCall(() => wasm.waitFor(requested, rule.waitMs, rule.maxWaitMs));
}

/**
 * The places for waiting requests: at most `perKey` on one record and `total` in
 * all. `take(id)` returns the function that gives the place back, or null when
 * none is free.
 */
export function waiterSlots({ perKey, total }) {
  /** @type {Map<string, number>} */
  const byKey = new Map();
  let all = 0;
  return {
    take(id) {
      const here = byKey.get(id) ?? 0;
      if (here >= perKey || all >= total) return null;
      byKey.set(id, here + 1);
      all++;
      let given = false;
      return () => {
        if (given) return;
        given = true;
        all--;
        const left = byKey.get(id) - 1;
        if (left === 0) byKey.delete(id);
        else byKey.set(id, left);
      };
    },
    count: () => all,
  };
}

/**
 * The checked waiting options of a handler or an MCP protection: `rule` (`waitMs`:
 * how long a retry that asks nothing is held, 0 by default; `maxWaitMs`: the cap on
 * any wait) and `slots` (`maxWaitersPerKey` and `maxWaiters`), defaulting to core's
 * (`defaults`: `{ maxWaitMs, maxWaitersPerKey, maxWaiters }`). Each waiter holds an
 * open request and a timer, nothing more.
 */
export function waitingOptions(options, defaults) {
  return {
    rule: {
      waitMs: waitOption(options.waitMs ?? 0, "waitMs"),
      maxWaitMs: waitOption(options.maxWaitMs ?? defaults.maxWaitMs, "maxWaitMs"),
    },
    slots: waiterSlots({
      perKey: waitOption(options.maxWaitersPerKey ?? defaults.maxWaitersPerKey, "maxWaitersPerKey", true),
      total: waitOption(options.maxWaiters ?? defaults.maxWaiters, "maxWaiters", true),
    }),
  };
}

/** Validates a waiting option: a non-negative (`positive`: at least 1) safe integer. */
export function waitOption(value, name, positive = false) {
  if (!Number.isSafeInteger(value) || value < (positive ? 1 : 0)) {
    throw new IdemkitError("invalid-argument", `${name} must be a ${positive ? "positive" : "non-negative"} integer`);
  }
  return value;
}

/**
 * Resolves after `ms`, when `woken` resolves, or when either signal aborts, and
 * leaves no timer or listener behind.
 */
function pause(ms, woken, signal, done) {
  return new Promise((resolve) => {
    const timer = setTimeout(finish, ms);
    function finish() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", finish);
      done.removeEventListener("abort", finish);
      resolve();
    }
    signal?.addEventListener("abort", finish, { once: true });
    done.addEventListener("abort", finish, { once: true });
    woken?.then(finish);
  });
}

/**
 * Holds a request whose claim answered `inFlight` (`first`) for up to `durationMs`:
 * returns the first claim that is not in flight (a replay, a refusal, or `execute`
 * when the first attempt released its claim or its lease ran out), or the last
 * in-flight one when the wait ran out or `signal` aborted (the client left).
 * `reclaim()` claims again (a read and core's decision). Store failures reject.
 */
export async function holdWhileRunning({ adapter, first, durationMs, signal, reclaim }) {
  const wakes = typeof adapter.changed === "function";
  const until = Date.now() + durationMs;
  let held = first;
  for (let polls = 0; ; ) {
    const done = new AbortController();
    // Registered before the record is read again, so a write between that read and
    // the sleep still wakes this waiter.
    const woken = wakes ? adapter.changed(held.id, done.signal) : null;
    try {
      if (wakes) {
        held = await reclaim();
        if (held.outcome !== "inFlight") return held;
      }
      const left = until - Date.now();
      if (left <= 0 || signal?.aborted) return held;
      const leaseEnds = held.retryAfterSeconds * 1000;
      await pause(Math.min(left, leaseEnds, wakes ? left : wasm.fallbackPoll(polls++)), woken, signal, done.signal);
    } finally {
      // Drops this round's registration (an adapter's waker, the timer).
      done.abort();
    }
    if (signal?.aborted) return held;
    if (!wakes) {
      held = await reclaim();
      if (held.outcome !== "inFlight") return held;
    }
  }
}
