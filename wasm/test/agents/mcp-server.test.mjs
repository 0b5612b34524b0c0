// createMcpIdempotency in Node: real SDK servers (v1, and v2 with 2026-07-28
// negotiated) whose `book` tool counts its executions, called by the SDKs' own
// clients over HTTP. Records in memory for one server; in one SQLite file for two
// server processes and for a server killed mid-call.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { MCP_CAPABILITY, MCP_REPLAYED_META, MCP_WAIT_META, createMcpIdempotency, memoryAdapter, recordId } from "idemkit";
import { serve } from "./book-server.mjs";
import { connect, droppingFetch } from "./mcp-clients.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const ERAS = { v2: "2026-07-28", v1: "2025-11-25" };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Calls `book` with `args` under `key` on client `c` and resolves once that call
 * runs, to `{ first }`, the promise of its outcome.
 */
async function bookRunning(c, args, key) {
  const first = c.call("book", args, key);
  await sleep(150);
  return { first };
}

/** `outcome` is the gateway's refusal `type` with `code`, saying when to retry. */
function refusedToRetry(outcome, code, type) {
  assert.equal(outcome.error?.code, code, JSON.stringify(outcome));
  assert.equal(outcome.error.data.type, type);
  assert.ok(outcome.error.data.retryAfter >= 1);
}

for (const sdk of ["v2", "v1"]) {
  describe(`SDK ${sdk} server (${ERAS[sdk]})`, () => {
    const adapter = memoryAdapter();
    // One waiter per key: a second retry that asks to wait for the same running call is refused.
    const protection = createMcpIdempotency({ adapter, tenant: "clinic-a", tools: ["book", "confirm_book"], maxWaitersPerKey: 1 });
    const executions = new Map();
    const count = async (tool, args) => {
      const name = `${tool} ${args.customer ?? "-"}`;
      executions.set(name, (executions.get(name) ?? 0) + 1);
      return executions.get(name);
    };
    let server;
    before(async () => {
      server = await serve(sdk, protection, count);
    });
    after(() => server.close());

    /** A client of this server, on the era under test. */
    async function client(options) {
      const c = await connect(sdk, server.url, options);
      assert.equal(c.version, ERAS[sdk]);
      return c;
    }

    test("a retry after a lost response with the same key executes once and replays", async () => {
      const c = await client({ fetch: droppingFetch("lost-1") });
      const args = { customer: "lost", slot: "s-1" };
      const first = await c.call("book", args, "lost-1");
      assert.ok(first.error, "the first answer was lost on the way");
      const retry = await c.call("book", args, "lost-1");
      assert.equal(retry.result.structuredContent.booking, "bk_1");
      assert.equal(retry.result._meta[MCP_REPLAYED_META], true);
      assert.equal(executions.get("book lost"), 1);
      await c.close();
    });

    test("50 concurrent calls with one key execute once", async () => {
      const c = await client();
      const args = { customer: "race", slot: "s-1", delay_ms: 300 };
      const all = await Promise.all(Array.from({ length: 50 }, () => c.call("book", args, "race-1")));
      const executed = all.filter((o) => o.result && !o.result._meta?.[MCP_REPLAYED_META]);
      const replayed = all.filter((o) => o.result?._meta?.[MCP_REPLAYED_META] === true);
      const inProgress = all.filter((o) => o.error?.data?.type === "idempotency_key_in_progress");
      console.log(`${sdk}: 50 calls: ${executed.length} executed, ${replayed.length} replayed, ${inProgress.length} in progress`);
      assert.equal(executions.get("book race"), 1);
      assert.equal(executed.length, 1);
      assert.equal(executed.length + replayed.length + inProgress.length, 50);
      for (const o of inProgress) refusedToRetry(o, -31002, "idempotency_key_in_progress");
      await c.close();
    });

    test("a retry that asks to wait is held until the first call's result and replays it; one waiter too many is refused", async () => {
      const c = await client();
      const args = { customer: "waits", slot: "s-1", delay_ms: 600 };
      const { first } = await bookRunning(c, args, "waits-1");
      const asked = { [MCP_WAIT_META]: 5 };
      const started = Date.now();
      const [held, refused] = await Promise.all([
        c.call("book", args, "waits-1", asked),
        // The second asks a moment later: the key's one place is taken by then.
        sleep(50).then(() => c.call("book", args, "waits-1", asked)),
      ]);
      const waited = Date.now() - started;
      assert.equal((await first).result.structuredContent.booking, "bk_1");
      assert.equal(held.result.structuredContent.booking, "bk_1", JSON.stringify(held));
      assert.equal(held.result._meta[MCP_REPLAYED_META], true);
      assert.ok(waited >= 300, `held until the first call answered (${waited} ms)`);
      refusedToRetry(refused, -31010, "idempotency_too_many_waiters");
      assert.match(refused.error.message, /Nothing was executed/);
      assert.equal(executions.get("book waits"), 1);
      assert.equal(protection.waiting(), 0, "every place is given back");
      await c.close();
    });

    test("a retry whose wait runs out gets in progress, and one that does not ask is answered at once", async () => {
      const c = await client();
      const args = { customer: "outwaits", slot: "s-1", delay_ms: 2500 };
      const { first } = await bookRunning(c, args, "outwaits-1");
      let started = Date.now();
      const now = await c.call("book", args, "outwaits-1");
      refusedToRetry(now, -31002, "idempotency_key_in_progress");
      assert.ok(Date.now() - started < 1000, "not held");
      started = Date.now();
      const late = await c.call("book", args, "outwaits-1", { [MCP_WAIT_META]: 1 });
      const waited = Date.now() - started;
      refusedToRetry(late, -31002, "idempotency_key_in_progress");
      assert.ok(waited >= 900 && waited < 2300, `held for the second it asked (${waited} ms)`);
      assert.equal((await first).result.structuredContent.booking, "bk_1");
      assert.equal(executions.get("book outwaits"), 1);
      await c.close();
    });

    test("other arguments under the key are refused and not executed", async () => {
      const c = await client();
      const first = await c.call("book", { customer: "reuse", slot: "s-1" }, "reuse-1");
      assert.equal(first.result.structuredContent.slot, "s-1");
      const other = await c.call("book", { customer: "reuse", slot: "s-2" }, "reuse-1");
      assert.equal(other.error.code, -31003);
      assert.equal(other.error.data.type, "idempotency_key_conflict");
      assert.match(other.error.message, /Nothing was executed/);
      assert.equal(executions.get("book reuse"), 1);
      // The original still replays.
      const again = await c.call("book", { slot: "s-1", customer: "reuse" }, "reuse-1");
      assert.equal(again.result._meta[MCP_REPLAYED_META], true);
      await c.close();
    });

    test("a read-only tool is never claimed", async () => {
      const c = await client();
      const before = executions.get("list_bookings -") ?? 0;
      const first = await c.call("list_bookings", {}, "read-1");
      const second = await c.call("list_bookings", {}, "read-1");
      assert.ok(first.result && second.result);
      assert.equal(second.result._meta?.[MCP_REPLAYED_META], undefined);
      assert.equal(executions.get("list_bookings -") - before, 2, "both calls ran");
      assert.equal(await adapter.get(recordId("clinic-a", "list_bookings", "read-1")), null, "no record");
      await c.close();
    });

    test("an input_required tool executes once and a later retry replays its final result", async () => {
      const c = await client();
      const args = { customer: "confirm", slot: "s-1" };
      const first = await c.call("confirm_book", args, "confirm-1");
      assert.equal(first.result.structuredContent.booking, "bk_1", JSON.stringify(first));
      assert.equal(c.elicitations(), 1, "the user was asked once");
      const retry = await c.call("confirm_book", args, "confirm-1");
      assert.equal(retry.result.structuredContent.booking, "bk_1");
      assert.equal(retry.result._meta[MCP_REPLAYED_META], true);
      assert.equal(retry.result.resultType, undefined, "the client sees a complete result");
      assert.equal(c.elicitations(), 1, "a replay asks nobody");
      assert.equal(executions.get("book confirm"), 1);
      await c.close();
    });

    test("a call without a key is refused with the gateway's error and not executed", async () => {
      const c = await client();
      const keyless = await c.call("book", { customer: "keyless", slot: "s-1" });
      assert.equal(keyless.error.code, -31000);
      assert.equal(keyless.error.data.type, "idempotency_key_missing");
      assert.equal(executions.get("book keyless"), undefined);
      await c.close();
    });

    test("the server advertises io.idemkit/idempotency where its era looks and idempotentHint only on protected tools", async () => {
      const c = await client();
      const section = sdk === "v2" ? "extensions" : "experimental";
      assert.deepEqual(c.capabilities[section][MCP_CAPABILITY], {
        keyMeta: "io.idemkit/idempotency-key",
        keyParam: "idempotencyKey",
        replayedMeta: "io.idemkit/replayed",
      });
      const hints = Object.fromEntries((await c.listTools()).map((t) => [t.name, t.annotations?.idempotentHint ?? null]));
      assert.deepEqual(hints, { book: true, list_bookings: null, confirm_book: true });
      await c.close();
    });
  });
}

/** A book server in its own process over the SQLite file `db`; resolves to `{ url, kill() }`. */
function serverProcess(sdk, db, countFile, leaseMs) {
  const child = spawn(process.execPath, [join(here, "book-server.mjs"), sdk, db, countFile, ...(leaseMs ? [String(leaseMs)] : [])], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (chunk) => {
      out += chunk;
      const match = /listening on (\S+)/.exec(out);
      if (match) resolve({ url: new URL(match[1]), child, kill: () => child.kill("SIGKILL") });
    });
    child.on("exit", (code) => reject(new Error(`the server exited with ${code} before listening`)));
  });
}

const bookings = (countFile) => readFileSync(countFile, "utf8").split("\n").filter((l) => l.startsWith("book ")).length;

for (const sdk of ["v2", "v1"]) {
  describe(`SDK ${sdk} servers over one SQLite file`, () => {
    let dir;
    before(() => {
      dir = mkdtempSync(join(tmpdir(), "idemkit-mcp-"));
    });
    after(() => rmSync(dir, { recursive: true, force: true }));

    test("two server instances on one SQLite store still execute once", async () => {
      const db = join(dir, "two.sqlite");
      const countFile = join(dir, "two.count");
      const servers = await Promise.all([serverProcess(sdk, db, countFile), serverProcess(sdk, db, countFile)]);
      try {
        const clients = await Promise.all(servers.map((s) => connect(sdk, s.url)));
        const args = { customer: "two", slot: "s-1", delay_ms: 300 };
        const all = await Promise.all(Array.from({ length: 40 }, (_, i) => clients[i % 2].call("book", args, "two-1")));
        const answered = all.filter((o) => o.result).length;
        console.log(`${sdk}: 40 calls over two processes: ${answered} results, ${bookings(countFile)} execution(s)`);
        assert.equal(bookings(countFile), 1);
        for (const o of all) assert.ok(o.result || o.error.data.type === "idempotency_key_in_progress", JSON.stringify(o));
        // Afterwards both instances replay the one result.
        for (const c of clients) {
          const replay = await c.call("book", args, "two-1");
          assert.equal(replay.result._meta[MCP_REPLAYED_META], true);
          assert.equal(replay.result.structuredContent.booking, "bk_1");
          await c.close();
        }
        assert.equal(bookings(countFile), 1);
      } finally {
        for (const s of servers) s.kill();
      }
    });

    test("a server killed after the tool acted leaves an unknown outcome that every retry gets as a structured tool error", async () => {
      const db = join(dir, "crash.sqlite");
      const countFile = join(dir, "crash.count");
      const leaseMs = 400;
      const first = await serverProcess(sdk, db, countFile, leaseMs);
      const c1 = await connect(sdk, first.url, { timeoutMs: 2000 });
      const lost = await c1.call("book", { customer: "crash", slot: "s-1", crash: true }, "crash-1");
      assert.ok(lost.error, "the server died before answering");
      assert.equal(bookings(countFile), 1, "the tool acted");
      const second = await serverProcess(sdk, db, countFile, leaseMs);
      try {
        // Past the dead server's lease: the machine decides (External: unknown).
        await sleep(leaseMs + 200);
        const c2 = await connect(sdk, second.url);
        for (let i = 0; i < 2; i++) {
          const retry = await c2.call("book", { customer: "crash", slot: "s-1", crash: true }, "crash-1");
          assert.equal(retry.result.isError, true);
          const unknown = retry.result.structuredContent;
          assert.equal(unknown.state, "unknown");
          assert.equal(unknown.key, "crash-1");
          assert.match(unknown.since, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
          assert.match(unknown.check, /Do not call this tool again/);
          assert.match(retry.result.content[0].text, /will not be executed again/);
        }
        assert.equal(bookings(countFile), 1, "never executed again");
        await c2.close();
      } finally {
        second.kill();
        first.kill();
      }
    });
  });
}
