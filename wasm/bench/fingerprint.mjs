// Fingerprint throughput of the npm package in Node, next to `canonicalize` +
// `crypto.subtle.digest("SHA-256")`, on the same bodies as the Rust benchmarks
// (benches/src/bodies.rs, ported line by line: compare the `sha256` of each body
// with `idemkit-bodies`). Prints one JSON object.
//
//   npm --prefix wasm run build && node wasm/bench/fingerprint.mjs
//
// Env: BENCH_SECONDS (per implementation and body, default 1), BENCH_SIZES
// (comma-separated subset of 1KB,64KB,4MB).
import { createHash, webcrypto } from "node:crypto";
import os from "node:os";
import canonicalize from "canonicalize";
import * as idemkit from "idemkit";

const SECONDS = Number(process.env.BENCH_SECONDS ?? "1");
const SIZES = [["1KB", 1 << 10], ["64KB", 64 << 10], ["4MB", 4 << 20]].filter(
  ([name]) => !process.env.BENCH_SIZES || process.env.BENCH_SIZES.split(",").includes(name),
);
const SHAPES = [["api", 0x1de30001], ["numbers", 0x1de30002], ["unicode", 0x1de30003]];

// mulberry32, as benches/src/bodies.rs.
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
  const below = (n) => next() % Math.max(n, 1);
  return { next, below, pick: (items) => items[below(items.length)] };
}

const WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
  "juliet", "kilo", "lima", "mike", "november", "oscar", "papa"];
const CURRENCIES = ["EUR", "USD", "GBP", "JPY", "CHF"];
const STATUSES = ["pending", "confirmed", "shipped", "cancelled"];
const CODE_POINTS = [0xe9, 0xfc, 0xf1, 0xdf, 0x3b1, 0x3b2, 0x3c9, 0x436, 0x44f, 0x4e2d, 0x6587,
  0x65e5, 0x672c, 0x8a9e, 0xac00, 0x1f600, 0x1f680, 0x1f30d, 0x20ac, 0x2603];
const ESCAPES = ["\\u00e9", "\\n", "\\t", "\\\"", "\\\\", "\\u4e2d", "\\ud83d\\ude00", "\\/", "\\u0001"];

function builder() {
  const parts = [];
  let len = 0;
  return {
    push(s) { parts.push(s); len += Buffer.byteLength(s); },
    get len() { return len; },
    bytes() { return new TextEncoder().encode(parts.join("")); },
  };
}

function generate(shape, seed, target) {
  const r = rng(seed);
  const out = builder();
  const cp = () => String.fromCodePoint(CODE_POINTS[r.below(CODE_POINTS.length)]);
  if (shape === "api") {
    out.push("{\"request_id\":\"req-"); out.push(String(r.next()));
    out.push("\",\"customer\":{\"name\":\""); out.push(r.pick(WORDS));
    out.push("\",\"id\":\"cus_"); out.push(String(r.next()));
    out.push("\",\"email\":\""); out.push(r.pick(WORDS));
    out.push("@example.com\"},\"currency\":\""); out.push(r.pick(CURRENCIES));
    out.push("\",\"items\":[");
    for (let i = 0; out.len + 2 < target || i === 0; i++) {
      if (i > 0) out.push(",");
      out.push("{\"sku\":\""); out.push(r.pick(WORDS)); out.push("-"); out.push(String(r.below(100000)));
      out.push("\",\"quantity\":"); out.push(String(1 + r.below(20)));
      out.push(",\"unit_price\":"); out.push(String(r.below(100000)));
      out.push("."); out.push(String(10 + r.below(90)));
      out.push(",\"status\":\""); out.push(r.pick(STATUSES));
      out.push("\",\"gift\":"); out.push(r.below(2) === 0 ? "false" : "true");
      out.push(",\"note\":null,\"line\":"); out.push(String(i));
      out.push(",\"attributes\":{\"color\":\""); out.push(r.pick(WORDS));
      out.push("\",\"size\":\""); out.push(r.pick(["S", "M", "L", "XL"]));
      out.push("\"}}");
    }
    out.push("]}");
  } else if (shape === "numbers") {
    out.push("[");
    for (let i = 0; out.len + 1 < target || i === 0; i++) {
      if (i > 0) out.push(",");
      const a = r.below(1000000);
      const b = r.below(1000);
      switch (r.below(8)) {
        case 0: out.push(String(a)); break;
        case 1: out.push("-"); out.push(String(a + 1)); break;
        case 2: out.push(String(a)); out.push("."); out.push(String(100 + Math.floor(b / 10) * 10 + 1 + (b % 9))); break;
        case 3: out.push(String(a)); out.push(".50"); break;
        case 4: out.push(String(a)); out.push(b % 2 === 0 ? "e-2" : "E2"); break;
        case 5: out.push("0."); out.push(String(1 + (b % 9))); out.push(String((a % 1000) * 10 + 7)); break;
        case 6: out.push(String(1 + a)); out.push(String(100000000 + r.below(900000000))); break;
        default: out.push(String(b));
      }
    }
    out.push("]");
  } else {
    out.push("{");
    for (let i = 0; out.len + 1 < target || i === 0; i++) {
      if (i > 0) out.push(",");
      out.push("\""); out.push(cp()); out.push(String(999999 - i)); out.push("\":\"");
      const len = 8 + r.below(56);
      for (let j = 0; j < len; j++) {
        const k = r.below(10);
        if (k === 0) out.push(r.pick(ESCAPES));
        else if (k === 1 || k === 2) out.push(" ");
        else if (k === 3) out.push(r.pick(WORDS));
        else out.push(cp());
      }
      out.push("\"");
    }
    out.push("}");
  }
  return out.bytes();
}

const decoder = new TextDecoder("utf-8", { fatal: true });
const encoder = new TextEncoder();

const implementations = {
  idemkit_fingerprint: async (body) => idemkit.fingerprint(body, { operation: "bench.op" }),
  canonicalize_sha256: async (body) => {
    const text = canonicalize(JSON.parse(decoder.decode(body)));
    return webcrypto.subtle.digest("SHA-256", encoder.encode(text));
  },
};

async function measure(fn, body) {
  // Warm-up, then as many calls as fit in SECONDS (at least 3).
  for (let i = 0; i < 2; i++) await fn(body);
  let n = 0;
  const start = process.hrtime.bigint();
  const budget = BigInt(Math.round(SECONDS * 1e9));
  let elapsed = 0n;
  while (n < 3 || elapsed < budget) {
    await fn(body);
    n++;
    elapsed = process.hrtime.bigint() - start;
  }
  const ns = Number(elapsed) / n;
  return { ns_per_op: Math.round(ns), mib_per_s: Math.round((body.length / (ns / 1e9) / 1048576) * 100) / 100, iterations: n };
}

const results = [];
for (const [shape, seed] of SHAPES) {
  for (const [size, target] of SIZES) {
    const body = generate(shape, seed, target);
    const sha256 = createHash("sha256").update(body).digest("hex");
    const same = idemkit.canonicalize(body) === canonicalize(JSON.parse(decoder.decode(body)));
    const row = { shape, size, bytes: body.length, sha256, canonical_equal: same };
    for (const [name, fn] of Object.entries(implementations)) row[name] = await measure(fn, body);
    row.ratio = Math.round((row.idemkit_fingerprint.mib_per_s / row.canonicalize_sha256.mib_per_s) * 1000) / 1000;
    results.push(row);
  }
}
console.log(JSON.stringify({
  figure: "wasm_fingerprint",
  node: process.version,
  cpu: os.cpus()[0]?.model ?? "unknown",
  seconds_per_measurement: SECONDS,
  results,
}));
