// The record view and the claim answer cross from WebAssembly flat (numbers, one
// string cut by UTF-16 lengths, bytes): strings outside ASCII, including ones of
// two UTF-16 units, absent optional fields and byte fields must come through
// exactly, in every state a record reaches.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as idemkit from "idemkit";

const owner = "wörker-😀-7";
const stepName = "charge-€-💳";
const providerKey = "pk-ключ-😀";

function setup(effect = "external") {
  const adapter = idemkit.memoryAdapter();
  let now = 1_700_000_000_000;
  const idem = idemkit.createIdempotency({ adapter, operation: "payments.capture", effect, tenant: () => "acme", clock: () => now });
  const id = (key) => idemkit.recordId("acme", "payments.capture", key);
  const advance = (ms) => (now += ms);
  return { adapter, idem, id, advance };
}

test("a running record with steps: the claim answer and the view carry every string and time", async () => {
  const { adapter, idem, id, advance } = setup("local");
  const held = await idem.claim({ tenant: "acme", key: "k-run", body: "{}", owner });
  assert.equal(held.outcome, "execute");
  assert.equal(held.owner, owner);
  assert.equal(typeof held.token, "bigint");
  assert.deepEqual(held.steps, []);
  advance(5);
  assert.deepEqual(await idem.beginStep(held, stepName, providerKey), { dispatch: true, providerKey });
  advance(5);
  const view = await idem.completeStep(held, stepName, "réf-😀");
  assert.equal(view.state, "running");
  assert.equal(view.owner, owner);
  assert.deepEqual(view.steps, [
    { name: stepName, state: "done", providerKey, providerRef: "réf-😀", startedAt: 1_700_000_000_005, doneAt: 1_700_000_000_010 },
  ]);
  assert.equal(view.replayUntil, null);
  assert.equal(view.keepUntil, null);
  assert.deepEqual(idemkit.decodeRecord(adapter.get(id("k-run")).record), view);

  // A takeover (a Local record whose lease expired) answers with the steps it took over.
  advance(10 * 60 * 1000);
  const again = await idem.claim({ tenant: "acme", key: "k-run", body: "{}", owner: "second" });
  assert.equal(again.outcome, "execute");
  assert.equal(again.attempt, 2);
  assert.deepEqual(again.steps, view.steps);
});

test("a completed record: headers, body and resource reference come back as recorded, in the view and in a replay", async () => {
  const { adapter, idem, id } = setup();
  const held = await idem.claim({ tenant: "acme", key: "k-done", body: "{}" });
  const value = new Uint8Array([0xe2, 0x82, 0xac, 0x00, 0xff]);
  const done = await idem.complete(held, {
    status: 201,
    headers: { "content-type": "text/plain; charset=utf-8", location: value },
    body: "paid € 😀",
    resourceRef: "/orders/ü-😀",
  });
  assert.equal(done.state, "completed");
  assert.deepEqual(done.response, {
    status: 201,
    headers: [
      ["content-type", new TextEncoder().encode("text/plain; charset=utf-8")],
      ["location", value],
    ],
    body: new TextEncoder().encode("paid € 😀"),
    resourceRef: "/orders/ü-😀",
  });
  assert.deepEqual(idemkit.decodeRecord(adapter.get(id("k-done")).record), done);

  const replay = await idem.claim({ tenant: "acme", key: "k-done", body: "{}" });
  assert.equal(replay.outcome, "replay");
  assert.deepEqual(replay.response, done.response);

  const mismatch = await idem.claim({ tenant: "acme", key: "k-done", body: '{"other":1}' });
  assert.equal(mismatch.outcome, "mismatch");
  assert.equal(mismatch.status, 422);
});

test("a completed record without a body, an unknown one and a released one", async () => {
  const { adapter, idem, id } = setup();
  const empty = await idem.complete(await idem.claim({ tenant: "acme", key: "k-empty", body: "{}" }), { status: 204 });
  assert.deepEqual(empty.response, { status: 204, headers: [], body: null, resourceRef: null });

  const unknown = await idem.markUnknown(await idem.claim({ tenant: "acme", key: "k-unknown", body: "{}" }), "timeout — 😀");
  assert.equal(unknown.state, "unknown");
  assert.match(unknown.reason, /timeout — 😀/);
  assert.equal(typeof unknown.since, "number");
  assert.deepEqual(idemkit.decodeRecord(adapter.get(id("k-unknown")).record), unknown);
  const uncertain = await idem.claim({ tenant: "acme", key: "k-unknown", body: "{}" });
  assert.equal(uncertain.outcome, "uncertain");
  assert.equal(uncertain.since, unknown.since);

  const released = await idem.release(await idem.claim({ tenant: "acme", key: "k-released", body: "{}" }));
  assert.equal(released.state, "released");
  assert.equal(typeof released.releasedAt, "number");
  assert.deepEqual(idemkit.decodeRecord(adapter.get(id("k-released")).record), released);
});

test("a claim without an owner records this instance's id and the claim's number", async () => {
  const { adapter, idem, id } = setup();
  const uuid = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
  const first = await idem.claim({ tenant: "acme", key: "k-o1", body: "{}" });
  const second = await idem.claim({ tenant: "acme", key: "k-o2", body: "{}" });
  assert.match(first.owner, new RegExp(`^${uuid}-1$`));
  assert.equal(second.owner, `${first.owner.slice(0, 36)}-2`);
  assert.equal(idemkit.decodeRecord(adapter.get(id("k-o2")).record).owner, second.owner);
  const other = await setup().idem.claim({ tenant: "acme", key: "k-o1", body: "{}" });
  assert.notEqual(other.owner.slice(0, 36), first.owner.slice(0, 36), "another instance has another id");
});

test("header values given as strings are recorded as their UTF-8, long or short, one completion after another", async () => {
  const { idem } = setup();
  const long = "é😀".repeat(200);
  const first = await idem.complete(await idem.claim({ tenant: "acme", key: "k-h1", body: "{}" }), {
    status: 201,
    headers: { "content-type": `text/plain; note=${long}`, location: "/a" },
  });
  const second = await idem.complete(await idem.claim({ tenant: "acme", key: "k-h2", body: "{}" }), {
    status: 201,
    headers: [["Location", "/ü"], ["Content-Type", "text/plain"]],
  });
  const utf8 = (s) => new TextEncoder().encode(s);
  assert.deepEqual(first.response.headers, [["content-type", utf8(`text/plain; note=${long}`)], ["location", utf8("/a")]]);
  assert.deepEqual(second.response.headers, [["location", utf8("/ü")], ["content-type", utf8("text/plain")]]);
});

test("fencing tokens on either side of 2^53 come through exact, in the claim answer, the completion's view and a decoded record", async () => {
  // Up to 2^53 a token crosses as a number, past it as decimal text.
  for (const floor of [2n ** 53n - 2n, 2n ** 53n - 1n, 2n ** 53n, 2n ** 64n - 3n]) {
    const { adapter, idem, id } = setup();
    adapter.insert("idemkit:token-floor", new TextEncoder().encode(String(floor)), { gcDueAt: null });
    const held = await idem.claim({ tenant: "acme", key: "k-token", body: "{}" });
    assert.equal(held.token, floor + 1n, `above a floor of ${floor}`);
    const view = await idem.complete(held, { status: 201, headers: {}, body: "{}" });
    assert.equal(view.lastToken, floor + 1n);
    assert.equal(idemkit.decodeRecord(adapter.get(id("k-token")).record).lastToken, floor + 1n);
  }
});
