// What the MCP server wrapper (createMcpIdempotency) and the agent tool wrapper
// (aiSdkExecute) add to a tool call, in one Node process, nothing on the network.
//
// MCP server: an SDK v2 McpServer (@modelcontextprotocol/server) served by
// createMcpHandler, called with 2026-07-28 `tools/call` Requests straight into its
// fetch handler; its `book` tool only counts.
//   mcp_bare               the call, the server unprotected
//   mcp_fresh_memory       protected, a new key per call: claim, the tool, completion (memoryAdapter)
//   mcp_replay_memory      protected, a key already answered: the stored result, the tool not run
//   mcp_fresh_sqlite       as mcp_fresh_memory, records in a SQLite file (synchronous=FULL: an fsync per commit)
//   mcp_replay_sqlite      as mcp_replay_memory over that file
// Agent tool: the execute of an AI SDK tool posting to an in-process booking endpoint
// (a fetch function, no idempotency of its own).
//   agent_bare             an execute that posts and parses the JSON answer
//   agent_fresh_memory     aiSdkExecute (http), a new action per call: journal begin, attempt, status (memory journal)
//   agent_bare_twice       agent_bare, twice
//   agent_retried_memory   aiSdkExecute twice on a new action, as an SDK that runs a tool again: the second
//                          execution resumes the action from the journal and sends its key again
// and derived: *_added_us = figure − its bare figure (means), and the same from the medians.
//
//   npm --prefix wasm run build && npm --prefix wasm/bench ci && node wasm/bench/mcp-wrapper.mjs
//
// Env: BENCH_SECONDS (per figure, default 1; a tiny value such as 0.01 is a smoke run).
// Prints one JSON object (see benches/report_npm_mcp.py).
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { McpServer, createMcpHandler } from "@modelcontextprotocol/server";
import * as z from "zod/v4";
import { aiSdkExecute, createJournal, createMcpIdempotency, memoryAdapter, sqliteAdapter } from "idemkit";
import { benchSeconds, measure } from "./measure.mjs";

const benchDir = dirname(fileURLToPath(import.meta.url));
const sdkVersion = JSON.parse(readFileSync(join(benchDir, "node_modules", "@modelcontextprotocol", "server", "package.json"), "utf8")).version;
const SECONDS = benchSeconds();

let counter = 0;
const freshKey = () => `key-${++counter}`;
const args = { customer: "anna", slot: "2026-12-01T10:00" };

// ---- The MCP server --------------------------------------------------------------
let executions = 0;
function handlerFor(protection) {
  return createMcpHandler(() => {
    const server = new McpServer({ name: "bench", version: "1.0.0" });
    server.registerTool("book", { description: "Book a slot", inputSchema: z.object({ customer: z.string(), slot: z.string() }) }, async ({ customer, slot }) => {
      executions++;
      return { content: [{ type: "text", text: `booked ${slot}` }], structuredContent: { booking: `bk_${executions}`, customer, slot } };
    });
    return protection === null ? server : protection.protect(server);
  });
}

/** A 2026-07-28 tools/call of `book` with `key` (none: no key), as the SDK v2 client sends it. */
function call(key) {
  const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": { name: "bench", version: "1" }, "io.modelcontextprotocol/clientCapabilities": {} };
  if (key !== undefined) meta["io.idemkit/idempotency-key"] = key;
  return new Request("http://bench/mcp", {
    method: "POST",
    headers: { accept: "application/json, text/event-stream", "content-type": "application/json", "mcp-method": "tools/call", "mcp-name": "book", "mcp-protocol-version": "2026-07-28" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "book", arguments: args, _meta: meta } }),
  });
}

async function answer(handler, key, replayed) {
  const body = await (await handler.fetch(call(key))).json();
  if (body.result?.structuredContent?.booking === undefined) throw new Error(`no booking: ${JSON.stringify(body)}`);
  if ((body.result._meta?.["io.idemkit/replayed"] === true) !== replayed) throw new Error(`replayed should be ${replayed}`);
}

const bare = handlerFor(null);
const protectedOver = (adapter) => handlerFor(createMcpIdempotency({ adapter, tenant: "bench", tools: ["book"] }));
const inMemory = protectedOver(memoryAdapter());
const dir = mkdtempSync(join(os.tmpdir(), "idemkit-bench-mcp-"));
const db = new Database(join(dir, "records.sqlite"));
db.pragma("journal_mode = WAL");
const onDisk = protectedOver(sqliteAdapter(db));
const answeredMemory = freshKey();
await answer(inMemory, answeredMemory, false);
const answeredDisk = freshKey();
await answer(onDisk, answeredDisk, false);

// ---- The agent tool ------------------------------------------------------------------
let bookings = 0;
const service = async (_url, init) => {
  const { customer, slot } = JSON.parse(init.body);
  return Response.json({ booking: `bk_${++bookings}`, customer, slot }, { status: 201 });
};
const options = { toolCallId: "call_1", messages: [] };
async function bareExecute(input) {
  const response = await service("http://bench/appointments", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(input) });
  return response.json();
}
const journal = createJournal({ adapter: memoryAdapter() });
let action = 0;
const freshExecute = aiSdkExecute({ journal, actionId: () => `run-${++action}/book`, http: (input) => ({ url: "http://bench/appointments", body: input }), fetch: service, breaker: false });
let retried = 0;
const retriedExecute = aiSdkExecute({ journal, actionId: () => `retried-${retried}/book`, http: (input) => ({ url: "http://bench/appointments", body: input }), fetch: service, breaker: false });
const check = (output) => {
  if (typeof output?.booking !== "string") throw new Error(`no booking: ${JSON.stringify(output)}`);
};

const figures = {
  mcp_bare: () => answer(bare, undefined, false),
  mcp_fresh_memory: () => answer(inMemory, freshKey(), false),
  mcp_replay_memory: () => answer(inMemory, answeredMemory, true),
  mcp_fresh_sqlite: () => answer(onDisk, freshKey(), false),
  mcp_replay_sqlite: () => answer(onDisk, answeredDisk, true),
  agent_bare: async () => check(await bareExecute(args)),
  agent_fresh_memory: async () => check(await freshExecute(args, options)),
  agent_bare_twice: async () => {
    check(await bareExecute(args));
    check(await bareExecute(args));
  },
  agent_retried_memory: async () => {
    retried++;
    check(await retriedExecute(args, options));
    check(await retriedExecute(args, options));
  },
};
const results = {};
for (const [name, fn] of Object.entries(figures)) results[name] = await measure(fn, SECONDS);
db.close();
rmSync(dir, { recursive: true, force: true });

const diff = (a, b) => Math.round((a - b) * 100) / 100;
const added = (name, base, field) => diff(results[name][field], results[base][field]);
const derived = {};
for (const name of ["mcp_fresh_memory", "mcp_replay_memory", "mcp_fresh_sqlite", "mcp_replay_sqlite"]) {
  derived[`${name}_added_us`] = added(name, "mcp_bare", "mean_us");
  derived[`${name}_added_p50_us`] = added(name, "mcp_bare", "p50_us");
}
derived.agent_fresh_memory_added_us = added("agent_fresh_memory", "agent_bare", "mean_us");
derived.agent_fresh_memory_added_p50_us = added("agent_fresh_memory", "agent_bare", "p50_us");
derived.agent_retried_memory_added_us = added("agent_retried_memory", "agent_bare_twice", "mean_us");
derived.agent_retried_memory_added_p50_us = added("agent_retried_memory", "agent_bare_twice", "p50_us");

console.log(
  JSON.stringify({
    figure: "npm_mcp_wrapper",
    node: process.version,
    cpu: os.cpus()[0]?.model ?? "unknown",
    seconds_per_measurement: SECONDS,
    sdk: `@modelcontextprotocol/server@${sdkVersion}`,
    results,
    derived,
  }),
);
