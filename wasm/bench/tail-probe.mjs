import * as idemkit from "idemkit";
import { performance } from "node:perf_hooks";
const body = new Uint8Array(750).fill(65); body[0] = 123; body.fill(32, 1, 748); body[748] = 125; body[749] = 10;
const handler = async (request) => { await request.arrayBuffer(); return new Response('{"id":"pay_1"}', { status: 201, headers: { "content-type": "application/json" } }); };
let n = 0;
const request = () => new Request("https://api.example/payments", { method: "POST", headers: { "idempotency-key": `k-${++n}`, "content-type": "application/json" }, body });
const idem = idemkit.createIdempotency({ adapter: idemkit.memoryAdapter(), operation: "p", effect: "external", tenant: () => "acme" });
const slow = [];
const t0 = performance.now();
let count = 0;
while (performance.now() - t0 < 3000) {
  const t = performance.now();
  const r = await idem.handle(request(), handler);
  await r.arrayBuffer();
  const d = performance.now() - t;
  count++;
  if (d > 1) slow.push([Math.round(t - t0), d.toFixed(2)]);
}
console.log(count, "calls;", slow.length, "over 1 ms; total ms in them", slow.reduce((a, [, d]) => a + Number(d), 0).toFixed(1));
console.log(slow.slice(0, 40).map(([t, d]) => `${t}:${d}`).join(" "));
