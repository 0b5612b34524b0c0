// An SDK v1 MCP server (`@modelcontextprotocol/sdk`, 2025-11-25) in workerd: one
// Durable Object holds the sessions (a v1 session is in memory, so every request
// of a session must reach the same object), and its records and bookings are in
// that object's storage (durableObjectAdapter), or in D1 (d1Adapter) under
// /d1/mcp. `book_after_confirmation` asks the user through an elicitation pushed on the
// call's stream. Bundled by esbuild for the test (mcp-worker.test.mjs).
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
import { CfWorkerJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/cfworker";
import * as z from "zod/v4";
import { createMcpIdempotency, d1Adapter, durableObjectAdapter } from "idemkit";

const confirmSchema = { type: "object", properties: { confirm: { type: "boolean" } }, required: ["confirm"] };

function v1Server(storage, idempotency) {
  // workerd allows no code generation: ajv cannot compile the elicitation's schema.
  const server = new McpServer({ name: "idemkit-book-v1-workerd", version: "1.0.0" }, { jsonSchemaValidator: new CfWorkerJsonSchemaValidator() });
  const book = ({ customer, slot }) =>
    storage.transaction(async (txn) => {
      const n = ((await txn.get("bookings:next")) ?? 0) + 1;
      await txn.put({ "bookings:next": n, [`booking:${String(n).padStart(8, "0")}`]: { customer, slot } });
      return { content: [{ type: "text", text: `booked ${slot} for ${customer}` }], structuredContent: { booking: `bk_${n}`, customer, slot } };
    });
  server.registerTool("book", { description: "Book a slot", inputSchema: { customer: z.string(), slot: z.string() } }, book);
  server.registerTool(
    "list_bookings",
    { description: "List bookings", inputSchema: {}, annotations: { readOnlyHint: true } },
    async () => {
      const rows = await storage.list({ prefix: "booking:" });
      const bookings = [...rows].map(([key, b]) => ({ booking: `bk_${Number(key.slice("booking:".length))}`, ...b }));
      return { content: [{ type: "text", text: `${bookings.length} bookings` }], structuredContent: { bookings } };
    },
  );
  server.registerTool(
    "book_after_confirmation",
    { description: "Book after the user confirms", inputSchema: { customer: z.string(), slot: z.string() } },
    async ({ customer, slot }, extra) => {
      // On the call's own stream: a 2025 client may not have opened its GET stream yet.
      const answer = await server.server.elicitInput({ message: `Book ${slot} for ${customer}?`, requestedSchema: confirmSchema }, { relatedRequestId: extra.requestId });
      if (answer.action !== "accept" || answer.content?.confirm !== true) return { content: [{ type: "text", text: "not booked" }], isError: true };
      return book({ customer, slot });
    },
  );
  return idempotency.protect(server);
}

export class SessionDesk {
  constructor(ctx, env) {
    this.storage = ctx.storage;
    this.sessions = new Map();
    const protection = (adapter) => createMcpIdempotency({ adapter, tenant: "clinic-a", tools: ["book", "book_after_confirmation"] });
    this.byStore = { do: protection(durableObjectAdapter(ctx.storage)), d1: protection(d1Adapter(env.DB)) };
  }

  async fetch(request) {
    const store = new URL(request.url).pathname.startsWith("/d1/") ? "d1" : "do";
    const sessionId = request.headers.get("mcp-session-id");
    let transport = sessionId === null ? undefined : this.sessions.get(sessionId);
    if (transport === undefined) {
      if (sessionId !== null) return Response.json({ jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null }, { status: 404 });
      transport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => crypto.randomUUID(),
        onsessioninitialized: (id) => this.sessions.set(id, transport),
      });
      await v1Server(this.storage, this.byStore[store]).connect(transport);
    }
    return transport.handleRequest(request);
  }
}

export default {
  fetch(request, env) {
    return env.SESSION_DESK.get(env.SESSION_DESK.idFromName("clinic-a")).fetch(request);
  },
};
