// What `idemkit mcp` adds to a tools/call round trip (benches/mcp/run.sh starts
// the server and the gateway). One client, one keep-alive connection, calls one
// after another (2026-07-28 requests: no session), each figure over
// BENCH_SECONDS:
//
//   direct        tools/call straight to the SDK v2 server (the tool runs)
//   fresh         through the gateway, a new key per call (claim, forward, record)
//   replay        through the gateway, one key already answered (from the store)
//   pass-through  through the gateway, a read-only tool (never claimed)
//
//   node overhead.mjs DIRECT_URL GATEWAY_URL   → one JSON document on stdout
const [direct, gateway] = process.argv.slice(2);
const seconds = Number(process.env.BENCH_SECONDS ?? 5);
const envelope = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientCapabilities': {},
};

let n = 0;
async function call(url, name, args, key) {
  const meta = key ? { ...envelope, 'io.idemkit/idempotency-key': key } : envelope;
  const response = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': 'tools/call',
      'mcp-name': name,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: ++n, method: 'tools/call', params: { name, arguments: args, _meta: meta } }),
  });
  const text = await response.text();
  if (response.status !== 200 || text.includes('"error"')) throw new Error(`${response.status} ${text}`);
}

async function measure(label, once) {
  for (let i = 0; i < 50; i++) await once(`warm-${label}-${i}`);
  const times = [];
  const end = performance.now() + seconds * 1000;
  let i = 0;
  while (performance.now() < end) {
    const t = performance.now();
    await once(`${label}-${i++}`);
    times.push((performance.now() - t) * 1000);
  }
  times.sort((a, b) => a - b);
  const q = (p) => times[Math.min(times.length - 1, Math.floor(p * times.length))];
  return { calls: times.length, p50_us: q(0.5), p99_us: q(0.99), mean_us: times.reduce((a, b) => a + b, 0) / times.length };
}

const book = (i) => ({ customer: 'bench', slot: String(i) });
await call(gateway, 'book', book('replayed'), 'bench-replay-key');
const results = {};
results.direct = await measure('direct', (i) => call(direct, 'book', book(i)));
results.fresh = await measure('fresh', (i) => call(gateway, 'book', book(i), i));
results.replay = await measure('replay', () => call(gateway, 'book', book('replayed'), 'bench-replay-key'));
results.pass_through = await measure('pass', () => call(gateway, 'list_bookings', {}));
results.direct_read = await measure('direct-read', () => call(direct, 'list_bookings', {}));
console.log(JSON.stringify({ node: process.version, seconds_per_figure: seconds, results }, null, 1));
