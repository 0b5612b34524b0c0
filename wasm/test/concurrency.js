// 50 concurrent `handle` calls with one key: the handler must run exactly once,
// whatever the runtime and adapter. The others get the replay (if they arrive after
// completion) or 409 request-in-progress; nothing else is acceptable.

/**
 * @param {typeof import("idemkit")} idemkit
 * @param {import("idemkit").Adapter} adapter
 * @param {{ calls?: number, handlerMs?: number, key?: string }} [options]
 */
export async function concurrentHandles(idemkit, adapter, options = {}) {
  const calls = options.calls ?? 50;
  const handlerMs = options.handlerMs ?? 25;
  const key = options.key ?? `race-${Date.now()}-${Math.random()}`;
  const idem = idemkit.createIdempotency({ adapter, operation: "orders.create", effect: "external", tenant: () => "acme" });
  let executions = 0;
  const handler = async (request) => {
    executions++;
    const { sku } = await request.json();
    await new Promise((resolve) => setTimeout(resolve, handlerMs));
    return Response.json({ order: "o-1", sku }, { status: 201 });
  };
  const started = Date.now();
  const responses = await Promise.all(
    Array.from({ length: calls }, () =>
      idem.handle(
        new Request("https://shop.test/orders", {
          method: "POST",
          headers: { "idempotency-key": key, "content-type": "application/json" },
          body: '{"sku":"kettle"}',
        }),
        handler,
      ),
    ),
  );
  const ms = Date.now() - started;
  const outcomes = { executed: 0, replayed: 0, inProgress: 0, other: [] };
  for (const response of responses) {
    if (response.status === 201 && response.headers.get("idempotent-replayed") === "true") outcomes.replayed++;
    else if (response.status === 201) outcomes.executed++;
    else if (response.status === 409 && response.headers.get("retry-after") !== null) outcomes.inProgress++;
    else outcomes.other.push(`${response.status} ${(await response.text()).slice(0, 160)}`);
  }
  return { calls, executions, ms, ...outcomes };
}

/** Throws unless exactly one call executed and every other call was answered per the contract. */
export function checkConcurrency(result) {
  const ok =
    result.executions === 1 &&
    result.executed === 1 &&
    result.other.length === 0 &&
    result.executed + result.replayed + result.inProgress === result.calls;
  if (!ok) {
    const { other, ...counts } = result;
    throw new Error(`concurrency contract broken: ${JSON.stringify(counts)}; ${other.length} other answers, e.g. ${other.slice(0, 2).join(" | ")}`);
  }
}

/**
 * `waiters` retries that ask to wait (`Prefer: wait=10`) while the first attempt with
 * their key runs `handlerMs`: every one must get the stored 201 as a replay with
 * `Preference-Applied: wait=10`, and the handler must run once. Returns the counts
 * and how long after the handler returned the last waiter was answered.
 * @param {typeof import("idemkit")} idemkit
 * @param {import("idemkit").Adapter} adapter
 */
export async function waitingRetries(idemkit, adapter, { waiters = 10, handlerMs = 500 } = {}) {
  const idem = idemkit.createIdempotency({ adapter, operation: "orders.create", effect: "external", tenant: () => "acme" });
  let executions = 0;
  let returnedAt = 0;
  const handler = async () => {
    executions++;
    await new Promise((resolve) => setTimeout(resolve, handlerMs));
    returnedAt = Date.now();
    return Response.json({ order: "o-1" }, { status: 201 });
  };
  const send = (headers = {}) =>
    idem.handle(new Request("https://shop.test/orders", { method: "POST", headers: { "idempotency-key": "wait-1", "content-type": "application/json", ...headers }, body: "{}" }), handler);
  const first = send();
  await new Promise((resolve) => setTimeout(resolve, 50));
  let lastAt = 0;
  const answers = await Promise.all(
    Array.from({ length: waiters }, async () => {
      const r = await send({ prefer: "wait=10" });
      lastAt = Math.max(lastAt, Date.now());
      return `${r.status} ${r.headers.get("idempotent-replayed")} ${r.headers.get("preference-applied")}`;
    }),
  );
  await first;
  const replays = answers.filter((a) => a === "201 true wait=10").length;
  const result = { waiters, executions, replays, lagMs: lastAt - returnedAt, other: answers.filter((a) => a !== "201 true wait=10") };
  if (executions !== 1 || replays !== waiters) throw new Error(`waiting contract broken: ${JSON.stringify(result)}`);
  return result;
}
