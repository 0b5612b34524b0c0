// A Cloudflare Worker that creates orders at most once per Idempotency-Key.
//
//   POST /orders       records in D1 (d1Adapter), orders in D1
//   POST /do/orders    records in the tenant's Durable Object (durableObjectAdapter), orders in it too
//
// Each order is written in the database that holds its record, by
// `execution.completeWith`: the order and the record's completion commit in one
// transaction (a D1 batch, a storage transaction), so an order is created exactly
// once per key, even when the Worker dies mid-request.
//
// The tenant comes from the API key (never from the body or the Idempotency-Key).
//
// Records are collected (docs/architecture.md, retention): a Cron Trigger (wrangler.toml's
// `[triggers] crons`) runs `idempotency.gc()` over D1, and each Durable Object
// collects its own records from an alarm. GC deletes only Completed and Released
// records past their record window and drops response bodies past the replay
// window; Running and Unknown records are never touched.
// Workers KV is deliberately not used: it has no atomic insert-if-absent or
// compare-and-set, so two concurrent retries could both execute.
import { createIdempotency, d1Adapter, durableObjectAdapter } from "idemkit";

// Demo credentials; a real Worker verifies a token or a session.
const API_KEYS = { "sk_test_acme": "acme", "sk_test_globex": "globex" };

/** GC passes per run and records per pass: bounded work per Cron Trigger or alarm. */
const GC_PASSES = 10;
const GC_BATCH = 500;
const HOUR = 60 * 60 * 1000;

function tenantOf(request) {
  const token = request.headers.get("authorization")?.replace(/^Bearer\s+/i, "");
  return API_KEYS[token] ?? null;
}

function ordersIdempotency(adapter) {
  return createIdempotency({
    adapter,
    operation: "orders.create",
    // Local: the order commits with the outcome or not at all, so a request that
    // died before the commit left nothing behind and its retry may run again.
    effect: "local",
    tenant: tenantOf,
  });
}

/** Up to GC_PASSES bounded passes, each continuing after the last; the totals. */
async function collectGarbage(idem) {
  const total = { pruned: 0, deleted: 0, passes: 0 };
  let after;
  for (let pass = 0; pass < GC_PASSES; pass++) {
    const report = await idem.gc({ maxBatch: GC_BATCH, after });
    total.pruned += report.pruned;
    total.deleted += report.deleted;
    total.passes++;
    if (!report.more) break;
    after = report.next;
  }
  return total;
}

/** Creates the order with the record's completion; `orderWrites` gives the store's local writes of it. */
async function createOrder(request, execution, orderWrites) {
  const { sku, quantity } = await request.json();
  const id = `ord_${crypto.randomUUID()}`;
  const created = Response.json({ id, sku, quantity }, { status: 201, headers: { location: `/orders/${id}` } });
  await execution.completeWith(created, orderWrites(id, sku, quantity));
  // Once completeWith succeeded, handle answers the stored response, whatever is returned.
  return created;
}

export default {
  async fetch(request, env, ctx) {
    const url = new URL(request.url);
    if (request.method === "POST" && url.pathname === "/orders") {
      const idem = ordersIdempotency(d1Adapter(env.DB));
      // With ctx, a client that disconnects cannot cancel the recording.
      return idem.handle(request, async (req, execution) => {
        await env.DB.prepare("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, sku TEXT, quantity INTEGER)").run();
        // D1: bound statements, sent in one batch with the record's compare-and-set.
        return createOrder(req, execution, (id, sku, quantity) => [
          env.DB.prepare("INSERT INTO orders (id, sku, quantity) VALUES (?, ?, ?)").bind(id, sku, quantity),
        ]);
      }, ctx);
    }
    if (request.method === "POST" && url.pathname === "/do/orders") {
      const tenant = tenantOf(request);
      if (tenant === null) return new Response("unknown API key", { status: 401 });
      // One Durable Object per tenant holds that tenant's records and orders.
      return env.ORDER_BOOK.get(env.ORDER_BOOK.idFromName(tenant)).fetch(request);
    }
    if (url.pathname === "/stats") {
      const d1 = await env.DB.prepare("SELECT COUNT(*) AS n FROM orders").first().catch(() => ({ n: 0 }));
      const book = await env.ORDER_BOOK.get(env.ORDER_BOOK.idFromName(url.searchParams.get("tenant") ?? "acme")).fetch("https://do/stats");
      return Response.json({ d1Orders: d1.n, durableObjectOrders: (await book.json()).orders });
    }
    return new Response("not found", { status: 404 });
  },

  /** The Cron Trigger: collect the D1 records whose windows are over. */
  async scheduled(controller, env, ctx) {
    ctx.waitUntil(
      collectGarbage(ordersIdempotency(d1Adapter(env.DB))).then((total) => console.log(`gc ${controller.cron}: ${JSON.stringify(total)}`)),
    );
  },
};

export class OrderBook {
  constructor(ctx) {
    this.storage = ctx.storage;
    this.idem = ordersIdempotency(durableObjectAdapter(ctx.storage));
  }

  /** Each object collects its own records, hourly while it holds any. */
  async alarm() {
    await collectGarbage(this.idem);
    await this.storage.setAlarm(Date.now() + HOUR);
  }

  async fetch(request) {
    if (new URL(request.url).pathname === "/stats") {
      return Response.json({ orders: (await this.storage.list({ prefix: "order:" })).size });
    }
    if ((await this.storage.getAlarm()) === null) await this.storage.setAlarm(Date.now() + HOUR);
    // A Durable Object: a function writing through the record's storage transaction.
    return this.idem.handle(request, (req, execution) =>
      createOrder(req, execution, (id, sku, quantity) => (txn) => txn.put(`order:${id}`, { sku, quantity })),
    );
  }
}
