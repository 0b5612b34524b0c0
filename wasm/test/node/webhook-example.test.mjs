// The webhook example over real HTTP on 127.0.0.1: replay, 422, 409, 400.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import Database from "better-sqlite3";
import { createWebhookServer } from "../../examples/webhook/server.js";

let server;
let base;
let db;
const gates = new Map();

before(async () => {
  db = new Database(":memory:");
  server = createWebhookServer({
    db,
    // Events of type "slow" wait until the test opens their gate, so a duplicate
    // delivery arrives while the first one is still being applied.
    apply: async (event, key) => {
      if (event.type === "slow") await new Promise((resolve) => gates.set(key, resolve));
      db.prepare("INSERT INTO ledger VALUES (?, ?, ?)").run(key, event.type, event.amount);
    },
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${server.address().port}/webhooks/payments`;
});
after(() => new Promise((resolve) => server.close(resolve)));

function deliver(key, event, headers = {}) {
  return fetch(base, {
    method: "POST",
    headers: {
      authorization: "Bearer whsec_demo",
      "content-type": "application/json",
      ...(key === undefined ? {} : { "idempotency-key": key }),
      ...headers,
    },
    body: JSON.stringify(event),
  });
}

const applied = (key) => db.prepare("SELECT COUNT(*) AS n FROM ledger WHERE event = ?").get(key).n;

test("a redelivered event is answered from the record with Idempotent-Replayed: true", async () => {
  const first = await deliver("evt_1", { type: "payment.succeeded", amount: 1200, delivered_at: "10:00:00" });
  assert.equal(first.status, 200);
  assert.equal(first.headers.get("idempotent-replayed"), null);
  const again = await deliver("evt_1", { type: "payment.succeeded", amount: 1200, delivered_at: "10:05:00" });
  assert.equal(again.status, 200);
  assert.equal(again.headers.get("idempotent-replayed"), "true");
  assert.deepEqual(await again.json(), await first.json());
  assert.equal(applied("evt_1"), 1);
});

test("the same event id with another payload: 422 idempotency-key-reused", async () => {
  await deliver("evt_2", { type: "payment.succeeded", amount: 500 });
  const forged = await deliver("evt_2", { type: "payment.succeeded", amount: 50000 });
  assert.equal(forged.status, 422);
  assert.equal(forged.headers.get("content-type"), "application/problem+json");
  assert.equal((await forged.json()).type, "https://idemkit.dev/problems/idempotency-key-reused");
  assert.equal(applied("evt_2"), 1);
});

test("a duplicate delivered while the first is applied: 409 request-in-progress with Retry-After", async () => {
  const first = deliver("evt_3", { type: "slow", amount: 1 });
  while (!gates.has("evt_3")) await new Promise((resolve) => setTimeout(resolve, 5));
  const duplicate = await deliver("evt_3", { type: "slow", amount: 1 });
  assert.equal(duplicate.status, 409);
  assert.ok(Number(duplicate.headers.get("retry-after")) >= 1);
  assert.equal((await duplicate.json()).type, "https://idemkit.dev/problems/request-in-progress");
  gates.get("evt_3")();
  assert.equal((await first).status, 200);
  assert.equal(applied("evt_3"), 1);
});

test("no Idempotency-Key: 400 missing-idempotency-key; a malformed one: 400 invalid-idempotency-key", async () => {
  const missing = await deliver(undefined, { type: "payment.succeeded", amount: 1 });
  assert.equal(missing.status, 400);
  assert.equal((await missing.json()).type, "https://idemkit.dev/problems/missing-idempotency-key");
  const malformed = await deliver("evt 4", { type: "payment.succeeded", amount: 1 });
  assert.equal(malformed.status, 400);
  const problem = await malformed.json();
  assert.equal(problem.type, "https://idemkit.dev/problems/invalid-idempotency-key");
  assert.equal(problem.code, "key-invalid-character");
  assert.equal(db.prepare("SELECT COUNT(*) AS n FROM ledger").get().n, 3);
});

test("an unknown sender: 401, nothing applied", async () => {
  const response = await deliver("evt_5", { type: "payment.succeeded", amount: 1 }, { authorization: "Bearer wrong" });
  assert.equal(response.status, 401);
  assert.equal(applied("evt_5"), 0);
});
