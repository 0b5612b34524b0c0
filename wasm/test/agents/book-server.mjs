// An MCP server whose tools are protected by createMcpIdempotency, on the official
// TypeScript SDK v1 (`@modelcontextprotocol/sdk`, 2025-11-25, sessions) or v2
// (`@modelcontextprotocol/server`, 2026-07-28, and 2025 clients statelessly), served
// over HTTP by node:http. `count(tool, args)` is called on every execution of a tool
// that changes something and returns the execution's number.
//
// Tools: book {customer, slot, delay_ms?, crash?} (crash: exit right after executing,
// before answering), list_bookings (readOnlyHint, never protected), confirm_book
// {customer, slot} (asks the user first: an input_required result on 2026-07-28, an
// elicitation pushed on the stream on 2025-11-25).
//
//   node book-server.mjs v1|v2 DB COUNT_FILE [LEASE_MS]
//     serves with the records in the SQLite file DB and one line per execution
//     appended to COUNT_FILE; prints "listening on http://127.0.0.1:PORT/mcp".
import { appendFileSync, readFileSync } from "node:fs";
import http from "node:http";
import { randomUUID } from "node:crypto";
import * as z from "zod/v4";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const bookShape = { customer: z.string(), slot: z.string(), delay_ms: z.number().optional(), crash: z.boolean().optional() };
const confirmSchema = { type: "object", properties: { confirm: { type: "boolean" } }, required: ["confirm"] };

function tools(count) {
  return {
    async book({ customer, slot, delay_ms, crash }) {
      if (delay_ms) await sleep(delay_ms);
      const n = await count("book", { customer, slot });
      // The effect happened; the answer never leaves.
      if (crash) process.exit(3);
      return {
        content: [{ type: "text", text: `booked ${slot} for ${customer} (#${n})` }],
        structuredContent: { booking: `bk_${n}`, customer, slot },
      };
    },
    async listBookings() {
      const n = await count("list_bookings", {});
      return { content: [{ type: "text", text: `listed (#${n})` }] };
    },
  };
}

/** A v2 server factory (one McpServer per request, as createMcpHandler wants), protected by `protection`. */
export async function v2Factory(protection, count) {
  const { McpServer, inputRequired, acceptedContent } = await import("@modelcontextprotocol/server");
  const { book, listBookings } = tools(count);
  return () => {
    const server = new McpServer({ name: "idemkit-book-v2", version: "2.0.0" });
    server.registerTool("book", { description: "Book a slot", inputSchema: z.object(bookShape) }, book);
    server.registerTool(
      "list_bookings",
      { description: "List bookings", inputSchema: z.object({}), annotations: { readOnlyHint: true } },
      listBookings,
    );
    server.registerTool(
      "confirm_book",
      { description: "Book after the user confirms", inputSchema: z.object({ customer: z.string(), slot: z.string() }) },
      async ({ customer, slot }, ctx) => {
        const confirmed = acceptedContent(ctx.mcpReq.inputResponses, "confirm", z.object({ confirm: z.boolean() }));
        if (confirmed?.confirm !== true) {
          return inputRequired({
            inputRequests: { confirm: inputRequired.elicit({ message: `Book ${slot} for ${customer}?`, requestedSchema: confirmSchema }) },
          });
        }
        return book({ customer, slot });
      },
    );
    return protection.protect(server);
  };
}

/** A v1 server (one per session), protected by `protection`. */
export async function v1Server(protection, count) {
  const { McpServer } = await import("@modelcontextprotocol/sdk/server/mcp.js");
  const { book, listBookings } = tools(count);
  const server = new McpServer({ name: "idemkit-book-v1", version: "1.0.0" });
  server.registerTool("book", { description: "Book a slot", inputSchema: bookShape }, book);
  server.registerTool(
    "list_bookings",
    { description: "List bookings", inputSchema: {}, annotations: { readOnlyHint: true } },
    listBookings,
  );
  server.registerTool(
    "confirm_book",
    { description: "Book after the user confirms", inputSchema: { customer: z.string(), slot: z.string() } },
    async ({ customer, slot }, extra) => {
      // On the call's own stream: a 2025 client may not have opened its GET stream yet.
      const answer = await server.server.elicitInput({ message: `Book ${slot} for ${customer}?`, requestedSchema: confirmSchema }, { relatedRequestId: extra.requestId });
      if (answer.action !== "accept" || answer.content?.confirm !== true) {
        return { content: [{ type: "text", text: "not booked" }], isError: true };
      }
      return book({ customer, slot });
    },
  );
  return protection.protect(server);
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/**
 * Serves `sdk` ("v1" or "v2") on 127.0.0.1; resolves to `{ url, close }`.
 * @param {"v1" | "v2"} sdk
 */
export async function serve(sdk, protection, count) {
  let handle;
  if (sdk === "v2") {
    const { createMcpHandler } = await import("@modelcontextprotocol/server");
    const handler = createMcpHandler(await v2Factory(protection, count));
    handle = async (req, res) => {
      const body = ["GET", "HEAD"].includes(req.method) ? undefined : await readBody(req);
      const response = await handler.fetch(new Request(`http://${req.headers.host}${req.url}`, { method: req.method, headers: req.headers, body }));
      res.writeHead(response.status, Object.fromEntries(response.headers));
      if (response.body) for await (const chunk of response.body) res.write(chunk);
      res.end();
    };
  } else {
    const { StreamableHTTPServerTransport } = await import("@modelcontextprotocol/sdk/server/streamableHttp.js");
    const { isInitializeRequest } = await import("@modelcontextprotocol/sdk/types.js");
    const sessions = new Map();
    handle = async (req, res) => {
      const sessionId = req.headers["mcp-session-id"];
      const body = req.method === "POST" ? JSON.parse((await readBody(req)).toString() || "null") : undefined;
      let transport = sessionId ? sessions.get(sessionId) : undefined;
      if (!transport && req.method === "POST" && isInitializeRequest(body)) {
        transport = new StreamableHTTPServerTransport({ sessionIdGenerator: () => randomUUID(), onsessioninitialized: (id) => sessions.set(id, transport) });
        await (await v1Server(protection, count)).connect(transport);
      }
      if (!transport) {
        res.writeHead(404, { "content-type": "application/json" });
        res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null }));
        return;
      }
      await transport.handleRequest(req, res, body);
    };
  }
  const server = http.createServer((req, res) => {
    handle(req, res).catch((err) => {
      console.error(err);
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: new URL(`http://127.0.0.1:${server.address().port}/mcp`),
    close: () => new Promise((resolve) => server.close(resolve) && server.closeAllConnections()),
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [sdk, db, countFile, leaseMs] = process.argv.slice(2);
  const { default: Database } = await import("better-sqlite3");
  const { createMcpIdempotency, sqliteAdapter } = await import("idemkit");
  const policy = leaseMs === undefined ? undefined : { leaseMs: Number(leaseMs) };
  const protection = createMcpIdempotency({
    adapter: sqliteAdapter(new Database(db)),
    tenant: "clinic-a",
    tools: { book: { policy }, confirm_book: { policy } },
  });
  const count = async (tool, args) => {
    appendFileSync(countFile, `${tool} ${args.customer ?? "-"} ${args.slot ?? "-"}\n`);
    return readFileSync(countFile, "utf8").split("\n").filter(Boolean).length;
  };
  const { url } = await serve(sdk, protection, count);
  console.log(`listening on ${url}`);
}
