import * as idemkit from "idemkit";
const body = new Uint8Array(750).fill(32); body[0] = 123; body[748] = 125;
const handler = async (request) => { await request.arrayBuffer(); return new Response('{"id":"pay_1"}', { status: 201, headers: { "content-type": "application/json" } }); };
let n = 0;
const request = () => new Request("https://api.example/payments", { method: "POST", headers: { "idempotency-key": `k-${++n}`, "content-type": "application/json" }, body });
const idem = idemkit.createIdempotency({ adapter: idemkit.memoryAdapter(), operation: "p", effect: "external", tenant: () => "acme" });

export const fns = {
  bare: async () => { const r = await handler(request()); await r.arrayBuffer(); },
  handle: async () => { const r = await idem.handle(request(), handler); await r.arrayBuffer(); },
  claim: async () => { const h = await idem.claim({ tenant: "acme", key: `c-${++n}`, body }); await idem.complete(h, { status: 201, headers: {}, body }); },
  req: async () => { const q = request(); await q.arrayBuffer(); },
  reqcopy: async () => { const q = request(); const b = new Uint8Array(await q.arrayBuffer()); await new Request(q, { body: b }).arrayBuffer(); },
  resp: async () => { const r = new Response('{"id":"pay_1"}', { status: 201, headers: { "content-type": "application/json" } }); await r.arrayBuffer(); },
};

