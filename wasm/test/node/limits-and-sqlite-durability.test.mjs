// The npm handler's limits and JS details, in Node over the real package:
// - a chunked request body is read through a counting reader that stops at
//   maxBodyBytes (413), so a 64 MiB stream is pulled only a little past a 1 MiB limit;
// - the configured fingerprint.contentType applies to a request without Content-Type;
// - the SQLite adapter makes WAL run with synchronous=FULL, refuses a file database
//   without a rollback journal, and sets a busy timeout when none is set.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import * as idemkit from "idemkit";

const dir = mkdtempSync(join(tmpdir(), "idemkit-limits-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const MiB = 1024 * 1024;
const CHUNK = 64 * 1024;

/** A ReadableStream of `total` bytes in CHUNK-sized pieces that counts how many pieces were pulled. */
function countingStream(total) {
  const pulled = { chunks: 0, cancelled: false };
  const stream = new ReadableStream(
    {
      pull(controller) {
        if (pulled.chunks * CHUNK >= total) {
          controller.close();
          return;
        }
        pulled.chunks++;
        controller.enqueue(new Uint8Array(CHUNK).fill(0x61));
      },
      cancel() {
        pulled.cancelled = true;
      },
    },
    { highWaterMark: 0 },
  );
  return { stream, pulled };
}

function handlerCounting() {
  const counter = { runs: 0 };
  const handler = async (request) => {
    counter.runs++;
    const body = new Uint8Array(await request.arrayBuffer());
    return new Response(JSON.stringify({ received: body.length }), { status: 201, headers: { "content-type": "application/json" } });
  };
  return { counter, handler };
}

function idempotency(options = {}) {
  return idemkit.createIdempotency({
    adapter: options.adapter ?? idemkit.memoryAdapter(),
    operation: "uploads.create",
    effect: "external",
    tenant: () => "acme",
    ...options,
  });
}

test("a chunked 64 MiB body against a 1 MiB limit: 413, the stream pulled only a little past the limit, nothing executed", async () => {
  const idem = idempotency({ maxBodyBytes: MiB });
  const { counter, handler } = handlerCounting();
  const { stream, pulled } = countingStream(64 * MiB);
  const request = new Request("https://api.test/uploads", {
    method: "POST",
    headers: { "idempotency-key": "upload-1", "content-type": "application/octet-stream" },
    body: stream,
    duplex: "half",
  });
  assert.equal(request.headers.get("content-length"), null, "no declared length: the reader must count");
  const response = await idem.handle(request, handler);
  assert.equal(response.status, 413);
  const problem = await response.json();
  assert.equal(problem.type, "https://idemkit.dev/problems/body-too-large");
  assert.equal(problem.limit, MiB);
  const atLimit = MiB / CHUNK; // 16 chunks fill the limit; the 17th crosses it
  console.log(`pulled ${pulled.chunks} chunks of ${CHUNK} bytes (${pulled.chunks * CHUNK} bytes) for a ${MiB}-byte limit`);
  assert.ok(pulled.chunks >= atLimit + 1, `the reader read past the limit to see it crossed (${pulled.chunks})`);
  assert.ok(pulled.chunks <= atLimit + 3, `pulled ${pulled.chunks} chunks of 64 KiB; at most ${atLimit + 3} expected`);
  assert.ok(pulled.cancelled, "the stream was cancelled");
  assert.equal(counter.runs, 0);
  assert.equal(await idem.inspect({ tenant: "acme", key: "upload-1" }), null, "nothing claimed");
});

test("a chunked body within the limit is read once and reaches the handler whole; a retry replays", async () => {
  const idem = idempotency({ maxBodyBytes: MiB });
  const { counter, handler } = handlerCounting();
  const send = () => {
    const { stream, pulled } = countingStream(MiB);
    const request = new Request("https://api.test/uploads", {
      method: "POST",
      headers: { "idempotency-key": "upload-2", "content-type": "application/octet-stream" },
      body: stream,
      duplex: "half",
    });
    return { request, pulled };
  };
  const first = send();
  const response = await idem.handle(first.request, handler);
  assert.equal(response.status, 201);
  assert.deepEqual(await response.json(), { received: MiB });
  assert.equal(first.pulled.chunks, MiB / CHUNK, "each chunk pulled once (no second read through clone())");
  const again = await idem.handle(send().request, handler);
  assert.equal(again.headers.get("idempotent-replayed"), "true");
  assert.equal(counter.runs, 1);
});

test("fingerprint rules core refuses fail when the idempotency is created, not on the first request", () => {
  const refused = (fingerprint) => {
    try {
      idempotency({ fingerprint });
    } catch (err) {
      assert.ok(err instanceof idemkit.IdemkitError, String(err));
      return err.code;
    }
    assert.fail(`created with ${JSON.stringify(fingerprint)}`);
  };
  // A JSON Pointer must start with "/" (RFC 6901).
  assert.match(refused({ include: ["amount"] }), /pointer/);
  assert.equal(refused({ profile: "loose" }), "invalid-argument");
  assert.equal(refused({ ignoreQuery: true, ignoreQueryParams: ["utm"] }), "invalid-argument");
  assert.equal(refused({ schemaVersion: -1 }), "invalid-argument");
});

test("a request without Content-Type is fingerprinted as the configured fingerprint.contentType", async () => {
  const idem = idempotency({ fingerprint: { contentType: "application/json", include: ["/amount"] } });
  const counter = { runs: 0 };
  const handler = async () => {
    counter.runs++;
    return new Response("ok", { status: 201 });
  };
  const bare = (body) =>
    new Request("https://api.test/uploads", {
      method: "POST",
      // A Uint8Array body gets no Content-Type from fetch, as many clients send it.
      body: new TextEncoder().encode(body),
      headers: { "idempotency-key": "no-type" },
    });
  const first = bare('{"amount":100,"note":"a"}');
  assert.equal(first.headers.get("content-type"), null);
  assert.equal((await idem.handle(first, handler)).status, 201);
  // Only /amount counts (the JSON rule was applied): another note is the same request.
  const same = await idem.handle(bare('{ "note": "b", "amount": 1e2 }'), handler);
  assert.equal(same.headers.get("idempotent-replayed"), "true");
  const changed = await idem.handle(bare('{"amount":101}'), handler);
  assert.equal(changed.status, 422);
  assert.equal(counter.runs, 1);
});

test("sqlite adapter: a WAL database with synchronous=NORMAL runs with synchronous=FULL", () => {
  const db = new Database(join(dir, "wal.db"));
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = NORMAL");
  assert.equal(db.pragma("synchronous", { simple: true }), 1);
  idemkit.sqliteAdapter(db);
  assert.equal(db.pragma("journal_mode", { simple: true }), "wal");
  assert.equal(db.pragma("synchronous", { simple: true }), 2, "FULL");
  db.close();
});

test("sqlite adapter: better-sqlite3's WAL default (NORMAL, applied at the first transaction) is raised to FULL; EXTRA is kept", async () => {
  const db = new Database(join(dir, "wal-default.db"));
  db.pragma("journal_mode = WAL");
  const adapter = idemkit.sqliteAdapter(db);
  await adapter.insert("id-1", new Uint8Array([1]));
  // Read after a transaction ran in WAL mode: that is when SQLite applies its default.
  assert.equal(db.pragma("synchronous", { simple: true }), 2, "FULL");
  db.pragma("synchronous = EXTRA");
  idemkit.sqliteAdapter(db);
  assert.equal(db.pragma("synchronous", { simple: true }), 3, "EXTRA kept");
  db.close();
});

test("sqlite: without the adapter, better-sqlite3 runs WAL with NORMAL (why the adapter sets FULL)", () => {
  const db = new Database(join(dir, "wal-plain.db"));
  db.pragma("journal_mode = WAL");
  db.exec("CREATE TABLE t (a)");
  assert.equal(db.pragma("synchronous", { simple: true }), 1);
  db.close();
});

test("sqlite adapter: a file database without a rollback journal is refused with a clear error", () => {
  for (const mode of ["OFF", "MEMORY"]) {
    const db = new Database(join(dir, `nojournal-${mode}.db`));
    // better-sqlite3's defensive mode refuses journal_mode=OFF; another driver may not.
    db.unsafeMode(true);
    db.pragma(`journal_mode = ${mode}`);
    db.unsafeMode(false);
    assert.equal(db.pragma("journal_mode", { simple: true }), mode.toLowerCase());
    assert.throws(() => idemkit.sqliteAdapter(db), (err) => err instanceof TypeError && err.message.includes(`journal_mode=${mode.toLowerCase()}`) && err.message.includes("acknowledged records"));
    db.close();
  }
  // An in-memory database (journal_mode=memory by nature) is a test setup: accepted.
  const memory = new Database(":memory:");
  assert.equal(memory.pragma("journal_mode", { simple: true }), "memory");
  idemkit.sqliteAdapter(memory);
  memory.close();
});

test("sqlite adapter: a connection without a busy timeout gets one; a configured one is kept", () => {
  const none = new Database(join(dir, "busy.db"), { timeout: 0 });
  assert.equal(none.pragma("busy_timeout", { simple: true }), 0);
  idemkit.sqliteAdapter(none);
  assert.equal(none.pragma("busy_timeout", { simple: true }), 5000);
  none.close();
  const own = new Database(join(dir, "busy.db"), { timeout: 12_000 });
  idemkit.sqliteAdapter(own);
  assert.equal(own.pragma("busy_timeout", { simple: true }), 12_000);
  idemkit.sqliteAdapter(own, { busyTimeoutMs: 250 });
  assert.equal(own.pragma("busy_timeout", { simple: true }), 250);
  assert.throws(() => idemkit.sqliteAdapter(own, { busyTimeoutMs: -1 }), TypeError);
  own.close();
});
