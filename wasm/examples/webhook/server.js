// A webhook receiver on Node's `http` module that applies each event at most once.
//
// Payment providers retry webhooks (timeouts, 5xx, their own crashes) and some send
// the same event twice concurrently. The sender puts the event id in the
// Idempotency-Key header; idemkit records the outcome in SQLite (better-sqlite3),
// so a retry gets the stored answer and a concurrent duplicate gets 409 with
// Retry-After, and the event is applied once.
//
//   node examples/webhook/server.js            # listens on 127.0.0.1:8787
//   curl -i localhost:8787/webhooks/payments -H 'authorization: Bearer whsec_demo' \
//        -H 'idempotency-key: evt_1' -H 'content-type: application/json' \
//        -d '{"type":"payment.succeeded","amount":1200}'
import { createServer } from "node:http";
import Database from "better-sqlite3";
import { createIdempotency, sqliteAdapter } from "idemkit";

// The sender is identified by its secret (a real receiver verifies a signature).
const SENDERS = { whsec_demo: "payments-provider" };

/**
 * @param {{ db: import("better-sqlite3").Database, apply?: (event: any) => Promise<void> }} options
 *   `apply` performs the event's effect (default: add the amount to a ledger table).
 */
export function createWebhookServer({ db, apply }) {
  db.exec("CREATE TABLE IF NOT EXISTS ledger (event TEXT, type TEXT, amount INTEGER)");
  const applyEvent =
    apply ?? (async (event, key) => void db.prepare("INSERT INTO ledger VALUES (?, ?, ?)").run(key, event.type, event.amount));

  const idem = createIdempotency({
    adapter: sqliteAdapter(db),
    operation: "webhooks.payments",
    // The ledger insert and the idempotency record are separate writes.
    effect: "external",
    tenant: (request) => SENDERS[request.headers.get("authorization")?.replace(/^Bearer\s+/i, "")] ?? null,
    // The provider adds a delivery timestamp to every attempt: it must not count.
    fingerprint: { exclude: ["/delivered_at"] },
  });

  const handler = async (request) => {
    const event = await request.json();
    await applyEvent(event, request.headers.get("idempotency-key"));
    return Response.json({ received: true, type: event.type }, { status: 200 });
  };

  const server = createServer(async (req, res) => {
    try {
      const chunks = [];
      for await (const chunk of req) chunks.push(chunk);
      const request = new Request(`http://${req.headers.host ?? "localhost"}${req.url}`, {
        method: req.method,
        headers: Object.entries(req.headers).flatMap(([k, v]) => (Array.isArray(v) ? v.map((x) => [k, x]) : [[k, v]])),
        body: req.method === "GET" || req.method === "HEAD" ? undefined : Buffer.concat(chunks),
      });
      const response =
        req.method === "POST" && new URL(request.url).pathname === "/webhooks/payments"
          ? await idem.handle(request, handler)
          : new Response("not found", { status: 404 });
      res.writeHead(response.status, [...response.headers].flat());
      res.end(Buffer.from(await response.arrayBuffer()));
    } catch (err) {
      res.writeHead(500, { "content-type": "text/plain" });
      res.end(`internal error: ${err.message}`);
    }
  });
  // For the GC timer below (and tests): the idempotency the server answers with.
  server.idempotency = idem;
  return server;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const server = createWebhookServer({ db: new Database(process.env.WEBHOOK_DB ?? "webhooks.db") });
  server.listen(Number(process.env.PORT ?? 8787), "127.0.0.1", () => {
    console.log(`webhook receiver on http://127.0.0.1:${server.address().port}/webhooks/payments`);
  });
  // Hourly, one bounded GC pass: records past their windows go (never Running or
  // Unknown ones), so the SQLite file does not grow without end.
  setInterval(() => server.idempotency.gc().catch((err) => console.error(`gc failed: ${err.message}`)), 60 * 60 * 1000).unref();
}
