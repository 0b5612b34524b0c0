// An MCP server in a Cloudflare Worker, on the official TypeScript SDK v2
// (`@modelcontextprotocol/server`: 2026-07-28 clients, and 2025 clients statelessly),
// whose booking tools run at most once per idempotency key: a client that lost an
// answer and calls again with the same key gets the recorded result, 50 calls at
// once run the tool once, and the key with other arguments is refused.
//
//   POST /mcp      records and bookings in D1 (d1Adapter)
//   POST /do/mcp   records and bookings in the tenant's Durable Object (durableObjectAdapter)
//
// The key is the call's `params._meta["io.idemkit/idempotency-key"]` (or
// `params.idempotencyKey`), as for `idemkit mcp`; the tenant comes from the API key,
// never from the call. `list_bookings` only reads, so it is never claimed.
// `book_after_confirmation` asks the user first (`input_required`): the question is
// interim and never recorded, the confirmed booking is.
//
// Deploy with `npx wrangler deploy` after `npm install idemkit @modelcontextprotocol/server zod`.
import { McpServer, acceptedContent, createMcpHandler, inputRequired } from "@modelcontextprotocol/server";
import * as z from "zod/v4";
import { createMcpIdempotency, d1Adapter, durableObjectAdapter } from "idemkit";

// Demo credentials; a real Worker verifies a token (OAuth) and passes what it found as authInfo.
const API_KEYS = { sk_test_clinic_a: "clinic-a", sk_test_clinic_b: "clinic-b" };

/** The tools whose calls are claimed; `list_bookings` only reads and is left out. */
const PROTECTED = ["book", "book_after_confirmation"];

/** The tenant of a request, from its API key, or null. */
function tenantOf(request) {
  const token = request.headers.get("authorization")?.replace(/^Bearer\s+/i, "");
  return Object.hasOwn(API_KEYS, token ?? "") ? API_KEYS[token] : null;
}

/** Bookings in D1, one table for every tenant. */
function d1Bookings(db) {
  let ready;
  const table = () =>
    (ready ??= db
      .prepare("CREATE TABLE IF NOT EXISTS bookings (id INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL, customer TEXT NOT NULL, slot TEXT NOT NULL)")
      .run());
  return {
    async add(tenant, customer, slot) {
      await table();
      const row = await db.prepare("INSERT INTO bookings (tenant, customer, slot) VALUES (?, ?, ?) RETURNING id").bind(tenant, customer, slot).first();
      return `bk_${row.id}`;
    },
    async list(tenant) {
      await table();
      const { results } = await db.prepare("SELECT id, customer, slot FROM bookings WHERE tenant = ? ORDER BY id").bind(tenant).all();
      return results.map((r) => ({ booking: `bk_${r.id}`, customer: r.customer, slot: r.slot }));
    },
  };
}

/** Bookings in a Durable Object's storage (the object is the tenant's). */
function storageBookings(storage) {
  return {
    add(_tenant, customer, slot) {
      return storage.transaction(async (txn) => {
        const n = ((await txn.get("bookings:next")) ?? 0) + 1;
        await txn.put({ "bookings:next": n, [`booking:${String(n).padStart(8, "0")}`]: { customer, slot } });
        return `bk_${n}`;
      });
    },
    async list() {
      const rows = await storage.list({ prefix: "booking:" });
      return [...rows].map(([key, b]) => ({ booking: `bk_${Number(key.slice("booking:".length))}`, ...b }));
    },
  };
}

const confirmSchema = { type: "object", properties: { confirm: { type: "boolean" } }, required: ["confirm"] };

/** The MCP server of one request for `tenant`, its bookings in `bookings`, protected by `idempotency`. */
function bookingServer(tenant, bookings, idempotency) {
  const server = new McpServer({ name: "clinic-bookings", version: "1.0.0" });
  const book = async ({ customer, slot }) => {
    const booking = await bookings.add(tenant, customer, slot);
    return { content: [{ type: "text", text: `Booked ${slot} for ${customer}: ${booking}.` }], structuredContent: { booking, customer, slot } };
  };
  const args = z.object({ customer: z.string(), slot: z.string() });
  server.registerTool("book", { description: "Book a slot for a customer", inputSchema: args }, book);
  server.registerTool(
    "book_after_confirmation",
    { description: "Book a slot once the user confirms it", inputSchema: args },
    async ({ customer, slot }, ctx) => {
      const answer = acceptedContent(ctx.mcpReq.inputResponses, "confirm", z.object({ confirm: z.boolean() }));
      if (answer?.confirm !== true) {
        return inputRequired({
          inputRequests: { confirm: inputRequired.elicit({ message: `Book ${slot} for ${customer}?`, requestedSchema: confirmSchema }) },
        });
      }
      return book({ customer, slot });
    },
  );
  server.registerTool(
    "list_bookings",
    { description: "List the bookings", inputSchema: z.object({}), annotations: { readOnlyHint: true } },
    async () => {
      const all = await bookings.list(tenant);
      return { content: [{ type: "text", text: `${all.length} bookings` }], structuredContent: { bookings: all } };
    },
  );
  return idempotency.protect(server);
}

/** The MCP endpoint over `adapter` (records) and `bookings`: a fetch handler. */
function mcpEndpoint(adapter, bookings) {
  const idempotency = createMcpIdempotency({
    adapter,
    // authInfo is what this Worker verified (below); never the call's arguments or key.
    tenant: ({ authInfo }) => authInfo?.clientId ?? null,
    tools: PROTECTED,
  });
  const handler = createMcpHandler(({ authInfo }) => bookingServer(authInfo.clientId, bookings, idempotency));
  return (request, tenant) => handler.fetch(request, { authInfo: { token: "api-key", clientId: tenant, scopes: [] } });
}

let d1Endpoint;

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const tenant = tenantOf(request);
    if (url.pathname === "/mcp" || url.pathname === "/do/mcp") {
      if (tenant === null) return new Response("unknown API key", { status: 401 });
    } else {
      return new Response("not found", { status: 404 });
    }
    if (url.pathname === "/do/mcp") {
      // One Durable Object per tenant holds that tenant's records and bookings.
      return env.BOOKING_DESK.get(env.BOOKING_DESK.idFromName(tenant)).fetch(request);
    }
    d1Endpoint ??= mcpEndpoint(d1Adapter(env.DB), d1Bookings(env.DB));
    return d1Endpoint(request, tenant);
  },

  /** A Cron Trigger collects the D1 records whose windows are over. */
  async scheduled(controller, env, ctx) {
    const idempotency = createMcpIdempotency({ adapter: d1Adapter(env.DB), tenant: () => null, tools: PROTECTED });
    ctx.waitUntil(idempotency.gc({ maxBatch: 500 }));
  },
};

export class BookingDesk {
  constructor(ctx) {
    this.endpoint = mcpEndpoint(durableObjectAdapter(ctx.storage), storageBookings(ctx.storage));
  }

  fetch(request) {
    return this.endpoint(request, tenantOf(request));
  }
}
