// The agent tool wrappers under the Vercel AI SDK and OpenAI Agents JS, each driven
// by its own test model (no network): the example's booking tool
// (wasm/examples/agent-tools) against a booking service over HTTP, and MCP tools
// called through the AI SDK's MCP client and the official SDK clients against a
// protected MCP server.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { createMCPClient } from "@ai-sdk/mcp";
import { tool as agentsTool } from "@openai/agents";
import * as z from "zod";
import {
  MCP_REPLAYED_META,
  createBreaker,
  createJournal,
  createMcpIdempotency,
  idempotentMcpTools,
  memoryAdapter,
  openaiAgentsExecute,
  sqliteAdapter,
} from "idemkit";
import { bookForAiSdk, bookForOpenAIAgents } from "../../examples/agent-tools/booking-tools.mjs";
import { runAiSdk, runOpenAIAgents } from "./agent-drivers.mjs";
import { bookingService } from "./booking-service.mjs";
import { serve } from "./book-server.mjs";
import { connect, droppingFetch } from "./mcp-clients.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const input = { customer: "anna", slot: "2026-12-01T10:00" };

const SDKS = {
  "AI SDK": {
    tools: (settings) => ({ book: bookForAiSdk(settings) }),
    run: (options) => runAiSdk({ ...options, toolName: "book", input }),
  },
  "OpenAI Agents JS": {
    tools: (settings) => [bookForOpenAIAgents(settings)],
    run: (options) => runOpenAIAgents({ ...options, toolName: "book", input }),
  },
};

/** The tool's error as the model got it (the AI SDK reports the error; Agents JS a generic error text as the output). */
const errorText = (result) => result.error ?? String(result.output);
/** A tool output as a value (Agents JS may hand it over as JSON text). */
const valueOf = (output) => (typeof output === "string" ? JSON.parse(output) : output);

for (const [sdk, { tools, run }] of Object.entries(SDKS)) {
  describe(sdk, () => {
    test("a tool whose HTTP call times out after the server acted, retried by the SDK: one booking", async () => {
      // The service books, then answers only after the tool stopped waiting.
      const service = await bookingService({ acted: () => sleep(400) });
      try {
        const journal = createJournal({ adapter: memoryAdapter() });
        const settings = { journal, runId: "run-1", url: service.url, timeoutMs: 100, maxAttempts: 1, breaker: createBreaker() };
        const { results } = await run({
          tools: tools(settings),
          turns: 2,
          // The model re-plans and calls the tool again once the first booking is recorded.
          beforeTurn: async (turn) => turn === 1 && (await service.answered(1)),
        });
        assert.match(errorText(results[0]), /no definitive answer yet|An error occurred while running the tool/);
        const confirmed = valueOf(results[1].output);
        assert.deepEqual(confirmed, { booking: "bk_1", ...input });
        assert.equal(service.bookings.length, 1, "one booking");
        assert.equal(service.keys.length, 2);
        assert.equal(service.keys[0], service.keys[1], "the SDK's retry sent the same key");
      } finally {
        await service.close();
      }
    });

    test("a process killed mid-action and restarted resumes the same action with the same key", async () => {
      const dir = mkdtempSync(join(tmpdir(), "idemkit-agent-"));
      let child;
      const service = await bookingService({
        // The booking happened; the agent's process dies before it hears of it.
        acted: async () => {
          if (child.runs === 1) child.kill("SIGKILL");
        },
      });
      try {
        const db = join(dir, "journal.sqlite");
        const runAgent = () =>
          new Promise((resolve) => {
            const runs = (child?.runs ?? 0) + 1;
            child = spawn(process.execPath, [join(here, "agent-process.mjs"), sdk, db, service.url], { stdio: ["ignore", "pipe", "inherit"] });
            child.runs = runs;
            let out = "";
            child.stdout.on("data", (chunk) => (out += chunk));
            child.on("exit", (code, signal) => resolve({ code, signal, out }));
          });
        const first = await runAgent();
        assert.equal(first.signal, "SIGKILL");
        await service.answered(1);
        const second = await runAgent();
        assert.equal(second.code, 0);
        const report = JSON.parse(second.out);
        const confirmed = valueOf(report.results[0].output);
        assert.deepEqual(confirmed, { booking: "bk_1", ...input });
        assert.equal(service.bookings.length, 1, "one booking");
        assert.deepEqual(service.keys, [report.action.key, report.action.key], "the restarted process sent the key of the first");
        // The journal shows the attempt the killed process never finished.
        const journal = createJournal({ adapter: sqliteAdapter(new Database(db), { table: "idemkit_journal" }) });
        assert.deepEqual((await journal.attempts("run-7/book")).map((a) => a.outcome), [null, "201"]);
      } finally {
        await service.close();
        rmSync(dir, { recursive: true, force: true });
      }
    });

    test("an unknown outcome reaches the model as a structured result", async () => {
      // The service books, then fails: an External operation whose outcome nobody knows.
      const service = await bookingService({ fail: true });
      try {
        const journal = createJournal({ adapter: memoryAdapter() });
        const settings = { journal, runId: "run-3", url: service.url, maxAttempts: 3, baseDelayMs: 10, breaker: createBreaker() };
        const { results, ...sent } = await run({ tools: tools(settings), turns: 1 });
        const output = valueOf(results[0].output);
        assert.equal(output.state, "unknown");
        assert.equal(output.actionId, "run-3/book");
        assert.equal(output.key, service.keys[0]);
        assert.match(output.check, /Do not call this tool again/);
        assert.equal(results[0].error, undefined, "a result, not an error");
        // The model's next turn holds it as the tool's result.
        const nextTurn = JSON.stringify(sdk === "AI SDK" ? sent.prompts[1] : sent.inputs[1]);
        assert.match(nextTurn, /state\\*":\\*"unknown/);
        assert.equal(service.bookings.length, 1, "booked once, never again");
        assert.deepEqual(new Set(service.keys).size, 1);
      } finally {
        await service.close();
      }
    });
  });
}

/** An Agents JS tool calling the MCP tool `book` through `client` as one action (`settings`: journal, actionId, retries). */
function mcpBookTool(client, settings) {
  return agentsTool({
    name: "book",
    description: "Book a slot",
    parameters: z.object({ customer: z.string(), slot: z.string(), delay_ms: z.number().optional() }),
    execute: openaiAgentsExecute({ breaker: createBreaker(), ...settings, mcp: (args) => ({ client, name: "book", arguments: args }) }),
  });
}

describe("MCP tools called by agents", () => {
  // A short lease: a retry that finds a call still running waits at most that long.
  const protection = createMcpIdempotency({ adapter: memoryAdapter(), tenant: "clinic-a", tools: { book: { policy: { leaseMs: 3000 } } } });
  const executions = [];
  const count = async (tool, args) => executions.push(`${tool} ${args.customer}`);
  let server;
  let v1Server;
  before(async () => {
    server = await serve("v2", protection, count);
    v1Server = await serve("v1", protection, count);
  });
  after(() => Promise.all([server.close(), v1Server.close()]));
  const booked = (customer) => executions.filter((e) => e === `book ${customer}`).length;

  test("the AI SDK's MCP client sends the action's key in _meta: a lost answer, retried, books once", async () => {
    const customer = "ai-sdk-mcp";
    const client = await createMCPClient({ transport: { type: "http", url: server.url.href, fetch: droppingFetch(customer) } });
    try {
      const journal = createJournal({ adapter: memoryAdapter() });
      const all = await client.tools();
      const wrapped = idempotentMcpTools(client, all, { journal, actionId: (_input, { toolName }) => `run-9/${toolName}`, breaker: createBreaker() });
      assert.equal(wrapped.list_bookings, all.list_bookings, "read-only: left as it was");
      assert.notEqual(wrapped.book.execute, all.book.execute);
      const { results } = await runAiSdk({ tools: wrapped, toolName: "book", input: { customer, slot: "s-1" }, turns: 1 });
      assert.equal(results[0].output.structuredContent.booking, "bk_1");
      assert.equal(results[0].output._meta[MCP_REPLAYED_META], true, "the retry got the recorded result");
      assert.equal(booked(customer), 1);
      assert.deepEqual((await journal.attempts("run-9/book")).map((a) => a.outcome), ["timeout", "200"]);
    } finally {
      await client.close();
    }
  });

  test("OpenAI Agents JS calls an MCP tool through the SDK v2 client with the action's key: a lost answer, retried, books once", async () => {
    const customer = "agents-mcp";
    const c = await connect("v2", server.url, { fetch: droppingFetch(customer) });
    try {
      const journal = createJournal({ adapter: memoryAdapter() });
      const book = mcpBookTool(c.client, { journal, actionId: (_input, { context }) => `${context.runId}/book` });
      const { results } = await runOpenAIAgents({ tools: [book], toolName: "book", input: { customer, slot: "s-1" }, turns: 1, context: { runId: "run-11" } });
      const result = valueOf(results[0].output);
      assert.equal(result.structuredContent.customer, customer);
      assert.equal(result._meta[MCP_REPLAYED_META], true, "the retry got the recorded result");
      assert.equal(booked(customer), 1);
      assert.deepEqual((await journal.attempts("run-11/book")).map((a) => a.outcome), ["timeout", "200"]);
    } finally {
      await c.close();
    }
  });

  // On a 2025 session the client's cancellation reaches the call (a stateless server
  // serves it on another instance; there the call completes and is recorded).
  test("an MCP call the client gave up on while the tool ran is unknown, and the model gets it as a structured result", async () => {
    const customer = "gave-up";
    const c = await connect("v1", v1Server.url);
    try {
      const journal = createJournal({ adapter: memoryAdapter() });
      const book = mcpBookTool(c.client, {
        journal,
        actionId: () => "run-12/book",
        // The client waits 150 ms for a tool that takes 400: it cancels the call.
        timeoutMs: 150,
        maxAttempts: 6,
      });
      const { results, inputs } = await runOpenAIAgents({ tools: [book], toolName: "book", input: { customer, slot: "s-1", delay_ms: 400 }, turns: 1 });
      const output = valueOf(results[0].output);
      assert.equal(output.isError, true);
      assert.equal(output.structuredContent.state, "unknown");
      assert.match(JSON.stringify(inputs[1]), /unknown/);
      // Unknown because the client cancelled the call, not because a lease ran out.
      const record = await protection.inspect({ tenant: "clinic-a", tool: "book", key: output.structuredContent.key });
      assert.match(record.reason, /the client cancelled the call while it ran/);
      await sleep(400);
      assert.equal(booked(customer), 1, "the tool ran once: its answer was dropped, and it never ran again");
    } finally {
      await c.close();
    }
  });
});
