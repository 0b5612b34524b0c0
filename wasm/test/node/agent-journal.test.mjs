// The client side end to end: callWithRetry against the real appointments service
// (store/examples/appointments), through a TCP proxy that records the
// Idempotency-Key of every request and can swallow responses. Plus identity with
// the native core: deriveKey, the UUID v4 spelling, decideRetry and the action
// status give what Rust gives (wasm/examples/native_client.rs).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { EventEmitter, once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import * as idemkit from "idemkit";
import * as glue from "../../pkg/idemkit_wasm.js";
import { rng } from "../random-json.js";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..", "..");
const PROBLEMS = "https://idemkit.dev/problems/";
const SLOT = { customer_id: "c1", slot_id: "2026-12-01T10:00" };

execFileSync("cargo", ["build", "--locked", "--quiet", "-p", "idemkit", "--example", "appointments", "-p", "idemkit-wasm", "--example", "native_client"], { cwd: root, stdio: "inherit" });
const targetDir = JSON.parse(execFileSync("cargo", ["metadata", "--format-version", "1", "--no-deps"], { cwd: root, encoding: "utf8" })).target_directory;
const appointmentsBin = join(targetDir, "debug", "examples", "appointments");
const nativeClient = join(targetDir, "debug", "examples", "native_client");

const dir = mkdtempSync(join(tmpdir(), "idemkit-agent-"));
const children = new Set();
const proxies = new Set();

/** Starts the appointments service on its own databases; resolves to its base URL. */
async function startService(name, extra) {
  const child = spawn(
    appointmentsBin,
    ["--db", join(dir, `${name}-a.redb`), "--provider-db", join(dir, `${name}-p.redb`), "--listen", "127.0.0.1:0", ...extra],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  children.add(child);
  const lines = createInterface({ input: child.stdout });
  const [line] = await Promise.race([
    once(lines, "line"),
    once(child, "exit").then(([code]) => {
      throw new Error(`the appointments service exited (${code}) before listening`);
    }),
  ]);
  lines.on("line", () => {}); // keep draining stdout
  const m = /listening on (http:\/\/\S+)/.exec(line);
  assert.ok(m, `no address in ${JSON.stringify(line)}`);
  const url = new URL(m[1]);
  return { url: m[1], host: url.hostname, port: Number(url.port), child };
}

/**
 * A TCP proxy in front of `service`: records every request head that passes (its
 * connection number and Idempotency-Key) and, for the first `dropFirst`
 * connections, swallows the response and closes the client's socket.
 */
async function startProxy(service, { dropFirst = 0 } = {}) {
  const proxy = Object.assign(new EventEmitter(), { requests: [], connections: 0, dropped: 0 });
  const sockets = new Set();
  const server = net.createServer((client) => {
    const index = proxy.connections++;
    const upstream = net.connect(service.port, service.host);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => sockets.delete(s));
    }
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
    let pending = "";
    let bodyLeft = 0;
    client.on("data", (chunk) => {
      upstream.write(chunk);
      pending += chunk.toString("latin1"); // one character per byte
      for (;;) {
        if (bodyLeft > 0) {
          const take = Math.min(bodyLeft, pending.length);
          pending = pending.slice(take);
          bodyLeft -= take;
          if (bodyLeft > 0) break;
        }
        const end = pending.indexOf("\r\n\r\n");
        if (end < 0) break;
        const [line, ...fields] = pending.slice(0, end).split("\r\n");
        pending = pending.slice(end + 4);
        const headers = Object.fromEntries(fields.map((f) => [f.slice(0, f.indexOf(":")).trim().toLowerCase(), f.slice(f.indexOf(":") + 1).trim()]));
        bodyLeft = Number(headers["content-length"] ?? 0);
        const request = { connection: index, line, key: headers["idempotency-key"] ?? null, at: Date.now() };
        proxy.requests.push(request);
        proxy.emit("request", request);
      }
    });
    upstream.on("data", (chunk) => {
      if (index < dropFirst) {
        // The service answered; the client never hears it.
        proxy.dropped++;
        client.destroy();
        upstream.destroy();
        return;
      }
      client.write(chunk);
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  proxy.url = `http://127.0.0.1:${server.address().port}`;
  proxy.close = () => {
    for (const s of sockets) s.destroy();
    server.close();
  };
  proxies.add(proxy);
  return proxy;
}

/** The tenant's bookings at the calendar provider (straight to the service). */
async function bookings(service, tenant) {
  const response = await fetch(`${service.url}/appointments`, { headers: { authorization: `Bearer ${tenant}` } });
  assert.equal(response.status, 200);
  return (await response.json()).appointments;
}

function sqliteJournal(path) {
  const db = new Database(path, { timeout: 10_000 });
  return { db, journal: idemkit.createJournal({ adapter: idemkit.sqliteAdapter(db, { table: "idemkit_journal" }) }) };
}

const summary = (report) => `${report.status} after ${report.attempts.length} attempt(s): ${report.attempts.map((a) => `${a.outcome} (${a.endedAt - a.startedAt} ms)`).join(", ")}`;

let slow; // calendar booking takes 1.5 s
let uncertain; // ... and the service gives up waiting after 200 ms: outcome unknown
before(async () => {
  const t = Date.now();
  [slow, uncertain] = await Promise.all([
    startService("slow", ["--provider-latency-ms", "1500"]),
    startService("uncertain", ["--provider-latency-ms", "1500", "--provider-timeout-ms", "200", "--reconcile-every-ms", "600000"]),
  ]);
  console.log(`two appointments services started in ${Date.now() - t} ms`);
});

after(() => {
  for (const proxy of proxies) proxy.close();
  for (const child of children) child.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

test("client timeouts and dropped responses: retried with one key, confirmed, booked once", async () => {
  // Connection 1 is abandoned by the client (400 ms timeout < 1.5 s booking);
  // the service's answers on connections 2 and 3 are swallowed by the proxy.
  const proxy = await startProxy(slow, { dropFirst: 3 });
  const journal = idemkit.createJournal({ adapter: idemkit.memoryAdapter() });
  const started = Date.now();
  const report = await idemkit.callWithRetry({
    journal,
    actionId: "run-1/book",
    url: `${proxy.url}/appointments`,
    headers: { authorization: "Bearer tenant-drops" },
    body: SLOT,
    timeoutMs: 400,
    maxAttempts: 8,
    baseDelayMs: 100,
  });
  console.log(`${summary(report)}; ${proxy.requests.length} requests on ${proxy.connections} connections, ${proxy.dropped} responses dropped, ${Date.now() - started} ms`);
  const action = await journal.get("run-1/book");
  assert.equal(report.idempotencyKey, action.key);
  assert.ok(proxy.requests.length >= 4, `at least 4 requests (got ${proxy.requests.length})`);
  assert.ok(proxy.dropped >= 2, "responses were dropped");
  for (const request of proxy.requests) assert.equal(request.key, action.key, `${request.line} on connection ${request.connection}`);
  assert.equal(report.attempts[0].outcome, "timeout", "the first attempt timed out at the client");
  assert.ok(report.attempts.filter((a) => a.outcome === "timeout").length >= 3, "timeouts and dropped responses are both retried");
  assert.equal(report.status, "confirmed");
  assert.equal(report.httpStatus, 201);
  assert.equal(report.attempts.length, proxy.requests.length, "every request is a journalled attempt");
  assert.deepEqual((await journal.attempts("run-1/book")).map((a) => a.attemptId), report.attempts.map((a) => a.attemptId));
  const booking = JSON.parse(report.body);
  const list = await bookings(slow, "tenant-drops");
  assert.equal(list.length, 1, "exactly one booking");
  assert.equal(list[0].id, booking.id);
});

test("the agent process is killed (SIGKILL) mid-attempt; the re-run sends the same key and is confirmed, booked once", async () => {
  const proxy = await startProxy(slow);
  const journalPath = join(dir, "agent-journal.db");
  const args = JSON.stringify({ journal: journalPath, actionId: "run-2/book", url: `${proxy.url}/appointments`, tenant: "tenant-kill", body: SLOT, timeoutMs: 10_000 });
  const agent = () => spawn(process.execPath, [join(here, "agent-call.mjs"), args], { cwd: join(here, "..", ".."), stdio: ["ignore", "pipe", "inherit"] });

  const first = agent();
  children.add(first);
  const [seen] = await once(proxy, "request");
  // Kill it while the service books (1.5 s), not while the service is still
  // claiming the key: a disconnect during the claim's store write drops the
  // middleware's guard before the execution is detached, which marks the record
  // Unknown until the reconciler releases it — the re-run then rightly reports
  // `unknown`, which is not this scenario.
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(first.exitCode, null, "the agent is still waiting for its response");
  first.kill("SIGKILL");
  const [, signal] = await once(first, "exit");
  assert.equal(signal, "SIGKILL");
  assert.ok(seen.key, "the request carried a key");

  // What the dead process left: the key and an unfinished attempt, durable.
  const { db, journal } = sqliteJournal(journalPath);
  const action = await journal.get("run-2/book");
  assert.equal(action.key, seen.key, "the key on the wire is the journalled one");
  const attempts = await journal.attempts("run-2/book");
  assert.equal(attempts.length, 1);
  assert.equal(attempts[0].endedAt, null, "killed mid-attempt");
  assert.equal(await journal.status("run-2/book"), "pending");

  const started = Date.now();
  const second = agent();
  children.add(second);
  let out = "";
  second.stdout.on("data", (d) => (out += d));
  const [code] = await once(second, "exit");
  assert.equal(code, 0);
  const report = JSON.parse(out);
  console.log(`re-run: ${summary(report)}; ${Date.now() - started} ms; keys seen: ${new Set(proxy.requests.map((r) => r.key)).size}`);
  assert.equal(report.resumed, true);
  assert.equal(report.idempotencyKey, seen.key);
  assert.equal(report.status, "confirmed");
  for (const request of proxy.requests) assert.equal(request.key, seen.key);
  assert.equal((await journal.attempts("run-2/book")).length, 1 + report.attempts.length, "both runs' attempts are journalled");
  db.close();
  assert.equal((await bookings(slow, "tenant-kill")).length, 1, "exactly one booking");
});

test("409 outcome-uncertain stops the retries and reports unknown", async () => {
  const proxy = await startProxy(uncertain);
  const journal = idemkit.createJournal({ adapter: idemkit.memoryAdapter() });
  const report = await idemkit.callWithRetry({
    journal,
    actionId: "run-3/book",
    url: `${proxy.url}/appointments`,
    headers: { authorization: "Bearer tenant-uncertain" },
    body: SLOT,
    timeoutMs: 1000,
    baseDelayMs: 50,
  });
  console.log(summary(report));
  assert.deepEqual(report.attempts.map((a) => a.outcome), ["504 provider-timeout", "409 outcome-uncertain"]);
  assert.equal(report.status, "unknown");
  assert.equal(report.httpStatus, 409);
  assert.equal(JSON.parse(report.body).type, `${PROBLEMS}outcome-uncertain`);
  assert.equal(await journal.status("run-3/book"), "unknown");
  // Nothing more is sent once the outcome is uncertain.
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(proxy.requests.length, 2);
  assert.ok(proxy.requests.every((r) => r.key === report.idempotencyKey));
});

test("422: rejected after exactly one attempt", async () => {
  const proxy = await startProxy(slow);
  const journal = idemkit.createJournal({ adapter: idemkit.memoryAdapter() });
  const report = await idemkit.callWithRetry({
    journal,
    actionId: "run-4/book",
    url: `${proxy.url}/appointments`,
    headers: { authorization: "Bearer tenant-invalid" },
    body: { customer_id: 5 },
    baseDelayMs: 1,
  });
  console.log(summary(report));
  assert.equal(report.status, "rejected");
  assert.equal(report.httpStatus, 422);
  assert.equal(report.attempts.length, 1);
  assert.equal(proxy.requests.length, 1);
  assert.equal(await journal.status("run-4/book"), "rejected");
  assert.equal((await bookings(slow, "tenant-invalid")).length, 0);
});

test("same payload: the same key and a replay; another payload under the action id throws, nothing sent", async () => {
  const proxy = await startProxy(slow);
  const { db, journal } = sqliteJournal(join(dir, "payload.db"));
  const call = (body) =>
    idemkit.callWithRetry({ journal, actionId: "run-5/book", url: `${proxy.url}/appointments`, headers: { authorization: "Bearer tenant-payload" }, body, timeoutMs: 5000 });
  const first = await call(SLOT);
  assert.equal(first.status, "confirmed");
  assert.equal(first.resumed, false);
  // Member order is not a different payload (canonical JSON).
  const again = await call({ slot_id: SLOT.slot_id, customer_id: SLOT.customer_id });
  assert.equal(again.resumed, true);
  assert.equal(again.idempotencyKey, first.idempotencyKey);
  assert.equal(again.status, "confirmed");
  assert.equal(again.body, first.body, "the service replayed the first response");
  const sent = proxy.requests.length;
  await assert.rejects(() => call({ customer_id: "c2", slot_id: SLOT.slot_id }), (err) => {
    assert.ok(err instanceof idemkit.IdemkitError);
    assert.equal(err.code, "action-payload-changed");
    assert.equal(err.actionId, "run-5/book");
    assert.match(err.message, /"run-5\/book"/);
    return true;
  });
  await assert.rejects(() => idemkit.beginAction(journal, "run-5/book", { other: true }), { code: "action-payload-changed" });
  assert.equal(proxy.requests.length, sent, "nothing was sent for the other payload");
  assert.equal((await bookings(slow, "tenant-payload")).length, 1);
  db.close();
});

// ---- identity with the native core ------------------------------------------------

function native(command, input) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, [], { stdio: ["pipe", "pipe", "pipe"] });
    const out = [];
    const err = [];
    child.stdout.on("data", (d) => out.push(d));
    child.stderr.on("data", (d) => err.push(d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8") }));
    child.stdin.end(input);
  });
}

test("deriveKey and the UUID v4 spelling are the native core's (fixed vectors)", () => {
  // Computed by the native core (native_client) and checked in: a change to either
  // build's derivation breaks keys that runtimes already persisted.
  assert.equal(idemkit.deriveKey("travel-agent", "run-7", "book-flight"), "ik1-de73742dacf86504e8f373ff99bf0439");
  assert.equal(idemkit.deriveKey("", "", ""), "ik1-c157a8ed90b9cefc97e88644559b22d7");
  assert.notEqual(idemkit.deriveKey("ab", "c", "d"), idemkit.deriveKey("a", "bc", "d"));
  // IdempotencyKey::from_random([0xab; 16]) in core's documentation.
  assert.equal(glue.keyFromRandom(new Uint8Array(16).fill(0xab)), "abababab-abab-4bab-abab-abababababab");
  assert.throws(() => idemkit.deriveKey("x", "\ud800", "y"), { code: "lone-surrogate-in-string" });
});

test("keys, retry decisions and action status: wasm == native core on 3,000 seeded cases", async () => {
  const r = rng(0xc11e47);
  const text = () => r.pick(["", "a", "run-7", "book-flight", "é", "日本", "😀", "a\u0000b", "x".repeat(300), String(r.int(1e9))]);
  const hex = (n) => Array.from({ length: n }, () => r.int(256).toString(16).padStart(2, "0")).join("");
  const result = () => {
    const kind = r.pick(["connect-error", "timeout", "response", "response", "response"]);
    if (kind !== "response") return { kind, status: null, problemType: null, retryAfterMs: null, originalStatus: null };
    return {
      kind,
      status: r.pick([0, 200, 201, 204, 302, 400, 401, 403, 404, 408, 409, 409, 410, 410, 422, 425, 429, 500, 502, 503, 504, 599, 600]),
      problemType: r.pick([null, null, `${PROBLEMS}request-in-progress`, "outcome-uncertain", `${PROBLEMS}outcome-uncertain`, "idempotency-key-reused", `${PROBLEMS}response-expired`, "other"]),
      retryAfterMs: r.pick([null, null, 0, 1000, 3000, 59_000, 61_000, 120_000]),
      originalStatus: r.pick([null, 201, 400, 500, 1000]),
    };
  };
  const policy = () => ({ maxAttempts: 1 + r.int(8), baseDelayMs: r.pick([0, 1, 100, 200, 5000]), maxDelayMs: r.pick([0, 50, 1000, 10_000]), maxRetryAfterMs: r.pick([0, 1000, 60_000]) });
  const u64 = () => (BigInt(r.int(2 ** 32)) << 32n) | BigInt(r.int(2 ** 32));
  const cases = [];
  for (let i = 0; i < 3000; i++) {
    switch (r.int(4)) {
      case 0: cases.push({ op: "derive", namespace: text(), runId: text(), stepId: text() }); break;
      case 1: cases.push({ op: "random", bytes: hex(16) }); break;
      case 2: cases.push({ op: "decide", attempt: 1 + r.int(10), result: result(), policy: policy(), random: String(u64()) }); break;
      default: cases.push({ op: "status", results: Array.from({ length: r.int(6) }, result) });
    }
  }
  const strip = (res) => (res.kind === "response" ? res : { kind: res.kind });
  const wasmLines = cases.map((c) => {
    switch (c.op) {
      case "derive": return idemkit.deriveKey(c.namespace, c.runId, c.stepId);
      case "random": {
        // randomKey() draws its own bytes; the glue's keyFromRandom is what it calls.
        return glue.keyFromRandom(Uint8Array.from(Buffer.from(c.bytes, "hex")));
      }
      case "decide": {
        const d = idemkit.decideRetry(c.attempt, strip(c.result), c.policy, BigInt(c.random));
        return d.retry ? `retry ${d.delayMs}` : `stop ${d.status}`;
      }
      case "status": {
        const results = c.results.map(strip);
        return `${glue.actionStatus(results)} ${results.map((x) => idemkit.classifyAttempt(x)).join(",")}`;
      }
    }
  });
  const out = await native(nativeClient, JSON.stringify(cases));
  assert.equal(out.code, 0, out.stderr);
  const nativeLines = out.stdout.replace(/\n$/, "").split("\n");
  assert.equal(nativeLines.length, wasmLines.length);
  for (let i = 0; i < cases.length; i++) assert.equal(wasmLines[i].trimEnd(), nativeLines[i].trimEnd(), `case ${i}: ${JSON.stringify(cases[i])}`);
  const retries = wasmLines.filter((l) => l.startsWith("retry ")).length;
  const stops = wasmLines.filter((l) => l.startsWith("stop ")).length;
  console.log(`client identity: ${cases.length} cases (${retries} retries, ${stops} stops), all equal to native`);
  assert.ok(retries > 100 && stops > 100, "both decisions are exercised");
  assert.match(idemkit.randomKey(), /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
});

