// A booking service over HTTP for the agent tool tests: createIdempotency in front of a
// handler that books (External: a crash mid-way leaves an unknown outcome), served by
// node:http. `hooks.acted(request)` runs after each booking, before its answer
// (a test pauses or kills the client there); `hooks.fail` makes the handler throw
// after it booked. Every key it was sent is kept in `keys`.
import http from "node:http";
import { createIdempotency, memoryAdapter } from "idemkit";

export async function bookingService(hooks = {}) {
  const idempotency = createIdempotency({ adapter: memoryAdapter(), operation: "appointments.book", effect: "external", tenant: () => "clinic-a" });
  const bookings = [];
  const keys = [];
  let answers = 0;
  const waiters = [];
  const handler = async (request) => {
    const { customer, slot } = await request.json();
    bookings.push({ customer, slot });
    const booking = `bk_${bookings.length}`;
    await hooks.acted?.(request);
    if (hooks.fail) throw new Error("the calendar timed out after it booked");
    return Response.json({ booking, customer, slot }, { status: 201 });
  };
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    keys.push(req.headers["idempotency-key"]);
    const request = new Request(`http://${req.headers.host}${req.url}`, { method: req.method, headers: req.headers, body: Buffer.concat(chunks) });
    let response;
    try {
      response = await idempotency.handle(request, handler);
    } catch {
      response = new Response("internal error", { status: 500 });
    }
    // The outcome is recorded; the client may have gone already.
    answers++;
    for (const w of waiters.filter((w) => w.n <= answers)) w.resolve();
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(Buffer.from(await response.arrayBuffer()));
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/appointments`,
    bookings,
    keys,
    /** Resolves once `n` requests have been answered (their outcomes recorded). */
    answered: (n) => (answers >= n ? Promise.resolve() : new Promise((resolve) => waiters.push({ n, resolve }))),
    close: () => new Promise((resolve) => server.close(resolve) && server.closeAllConnections()),
  };
}
