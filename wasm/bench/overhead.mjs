// Per-request overhead of the npm package in Node, side by side in one process with
// the peer @node-idempotency/core (1.0.11, with @node-idempotency/storage-adapter-memory),
// on the same 750-byte JSON body, with in-memory stores on both sides.
//
// Measured (BENCH_SECONDS per figure, in BENCH_ROUNDS turns, default 5, the figures
// taking turns so that a slow minute of a shared machine falls on all of them; each
// figure the median of its rounds: wall-clock mean and p50 per op, ops/s from the
// mean, and the process's CPU µs per op):
//   peer_fresh              onRequest + onResponse of a new key (the body parsed by
//                           JSON.parse first, as a framework hands it to the peer)
//   peer_replay             onRequest of a key already answered
//   idemkit_claim_complete  claim + complete of a new key (the body as bytes)
//   idemkit_replay          claim of a key already answered
//   idemkit_fingerprint     fingerprint alone (what a claim computes)
//   idemkit_decode          decodeRecord of the completed record into a JS view
//   bare_handler            a fetch handler on a new Request, its response body read
//   handle_fresh            idem.handle(request, that handler) on a new key
//   handle_replay           idem.handle on a key already answered (handler not run)
//   fetch_copies            no idemkit code: the two fetch objects handle() makes on a
//                           new key that the bare handler does not (the handler's
//                           Request, carrying the bytes the fingerprint read from the
//                           client's, and the client's Response, made from the bytes
//                           recorded from the handler's), each made and read once
// and derived, each the median over rounds of the pair measured in that round:
// handle_*_added_us = handle_* − bare_handler, ratio_* = idemkit rate ÷ peer rate
// (the *_p50 ones from the rounds' p50s), handle_fresh_own_us = handle_fresh −
// bare_handler − fetch_copies (what idemkit's own steps add on a new key).
//
//   npm --prefix wasm run build && npm --prefix wasm/bench ci && node wasm/bench/overhead.mjs
//
// Env: BENCH_SECONDS (per figure, default 1; a tiny value such as 0.01 is a smoke run),
// BENCH_ONLY (comma-separated figure names: measure only those, e.g. to profile one with
// `node --cpu-prof`; the derived figures then lack what was left out).
// Prints one JSON object (see benches/report_npm.py).
import { createRequire } from "node:module";
import os from "node:os";
import * as idemkit from "idemkit";
import { benchRounds, benchSeconds, measureInTurns } from "./measure.mjs";

const require = createRequire(import.meta.url);
const { Idempotency } = require("@node-idempotency/core");
const { MemoryStorageAdapter } = require("@node-idempotency/storage-adapter-memory");
const peerVersion = require("@node-idempotency/core/package.json").version;
const peerAdapterVersion = require("@node-idempotency/storage-adapter-memory/package.json").version;

const SECONDS = benchSeconds();
const ROUNDS = benchRounds();
const BODY_BYTES = 750;

/** A payment-like JSON object, padded by its `note` to exactly BODY_BYTES of UTF-8. */
function makeBody() {
  const value = {
    amount: 1200,
    currency: "EUR",
    customer: { id: "cus_4f2a9c", email: "ada@example.com", name: "Ada Lovelace" },
    items: Array.from({ length: 4 }, (_, i) => ({ sku: `sku-${1000 + i}`, quantity: i + 1, unit_price: 12.5 * (i + 1) })),
    metadata: { order_id: "ord_7f3a", channel: "web", campaign: null },
    note: "",
  };
  const base = Buffer.byteLength(JSON.stringify(value));
  value.note = "x".repeat(BODY_BYTES - base);
  const bytes = new TextEncoder().encode(JSON.stringify(value));
  if (bytes.length !== BODY_BYTES) throw new Error(`body is ${bytes.length} bytes`);
  return bytes;
}

const body = makeBody();
const bodyText = new TextDecoder().decode(body);
const responseValue = { id: "pay_1", status: "captured", amount: 1200 };
const responseBody = new TextEncoder().encode(JSON.stringify(responseValue));
const OPERATION = "payments.capture";
const URL_ = "https://api.example/payments";

let counter = 0;
const freshKey = () => `key-${++counter}`;

// --- the peer ---------------------------------------------------------------
const peer = new Idempotency(new MemoryStorageAdapter());
const peerRequest = (key) => ({ method: "POST", path: "/payments", headers: { "idempotency-key": key }, body: JSON.parse(bodyText) });
const peerResponse = { body: responseValue, additional: { status: 201 } };
async function peerFresh() {
  const req = peerRequest(freshKey());
  if ((await peer.onRequest(req)) !== undefined) throw new Error("peer: a fresh key replayed");
  await peer.onResponse(req, peerResponse);
}
const peerAnswered = freshKey();
{
  const req = peerRequest(peerAnswered);
  await peer.onRequest(req);
  await peer.onResponse(req, peerResponse);
}
async function peerReplay() {
  const replayed = await peer.onRequest(peerRequest(peerAnswered));
  if (replayed?.additional?.status !== 201) throw new Error("peer: no replay");
}

// --- idemkit's lower-level calls ---------------------------------------------
const adapter = idemkit.memoryAdapter();
const idem = idemkit.createIdempotency({ adapter, operation: OPERATION, effect: "external", tenant: () => "acme" });
const stored = { status: 201, headers: { "content-type": "application/json" }, body: responseBody };
async function claimComplete() {
  const held = await idem.claim({ tenant: "acme", key: freshKey(), body });
  if (held.outcome !== "execute") throw new Error(`idemkit: fresh claim got ${held.outcome}`);
  await idem.complete(held, stored);
}
const answered = freshKey();
await idem.complete(await idem.claim({ tenant: "acme", key: answered, body }), stored);
async function replay() {
  const held = await idem.claim({ tenant: "acme", key: answered, body });
  if (held.outcome !== "replay") throw new Error(`idemkit: replay got ${held.outcome}`);
}
async function fingerprintOnly() {
  idemkit.fingerprint(body, { operation: OPERATION });
}
const answeredRecord = (await adapter.get(idemkit.recordId("acme", OPERATION, answered))).record;
async function decode() {
  if (idemkit.decodeRecord(answeredRecord).response.status !== 201) throw new Error("idemkit: decode");
}

// --- handle() beside the bare handler ------------------------------------------
const handler = async (request) => {
  const { amount } = await request.json();
  return new Response(JSON.stringify({ ...responseValue, amount }), { status: 201, headers: { "content-type": "application/json" } });
};
const request = (key) =>
  new Request(URL_, { method: "POST", headers: { "idempotency-key": key, "content-type": "application/json" }, body });
const httpIdem = idemkit.createIdempotency({ adapter: idemkit.memoryAdapter(), operation: OPERATION, effect: "external", tenant: () => "acme" });
async function bare() {
  const response = await handler(request(freshKey()));
  await response.arrayBuffer();
}
async function handleFresh() {
  const response = await httpIdem.handle(request(freshKey()), handler);
  if (response.status !== 201 || response.headers.has("idempotent-replayed")) throw new Error(`handle: fresh got ${response.status}`);
  await response.arrayBuffer();
}
const httpAnswered = freshKey();
await (await httpIdem.handle(request(httpAnswered), handler)).arrayBuffer();
async function handleReplay() {
  const response = await httpIdem.handle(request(httpAnswered), handler);
  if (response.headers.get("idempotent-replayed") !== "true") throw new Error(`handle: replay got ${response.status}`);
  await response.arrayBuffer();
}

// What Node's fetch objects cost handle() on a new key, without idemkit. The
// client's stream was read for the fingerprint, so the handler gets a copy of the
// Request with those bytes; the handler's Response was read to record it, so the
// client gets a new one with those bytes (a copy's stream, not the bytes, is what
// costs: `new Response(null)` is cheap).
const spent = request(freshKey());
await spent.arrayBuffer();
const handlerHeaders = new Headers({ "content-type": "application/json" });
async function fetchCopies() {
  await new Request(spent, { body, signal: null }).arrayBuffer();
  await new Response(responseBody, { status: 201, statusText: "", headers: handlerHeaders }).arrayBuffer();
}

const figures = {
  peer_fresh: peerFresh,
  peer_replay: peerReplay,
  idemkit_claim_complete: claimComplete,
  idemkit_replay: replay,
  idemkit_fingerprint: fingerprintOnly,
  idemkit_decode: decode,
  bare_handler: bare,
  handle_fresh: handleFresh,
  handle_replay: handleReplay,
  fetch_copies: fetchCopies,
};
const only = process.env.BENCH_ONLY?.split(",");
const chosen = Object.fromEntries(Object.entries(figures).filter(([name]) => !only || only.includes(name)));
const { results, paired, inRounds } = await measureInTurns(chosen, SECONDS, ROUNDS);
const rounded = (x, places) => (x === null ? null : Math.round(x * 10 ** places) / 10 ** places);
// What `figure` adds to the bare handler, and idemkit's rate ÷ the peer's (its time ÷ idemkit's), by `field`.
const added = (figure, field) => rounded(paired(figure, "bare_handler", (a, b) => a[field] - b[field]), 2);
// What handle() adds on a new key beyond the fetch copies, by `field`.
const own = (field) => rounded(inRounds(["handle_fresh", "bare_handler", "fetch_copies"], (h, b, c) => h[field] - b[field] - c[field]), 2);
const rateRatio = (figure, peerFigure, field) => rounded(paired(figure, peerFigure, (a, b) => b[field] / a[field]), 3);

console.log(JSON.stringify({
  figure: "npm_overhead",
  node: process.version,
  cpu: os.cpus()[0]?.model ?? "unknown",
  seconds_per_measurement: SECONDS,
  rounds: ROUNDS,
  body_bytes: body.length,
  peer: { package: "@node-idempotency/core", version: peerVersion, adapter: `@node-idempotency/storage-adapter-memory@${peerAdapterVersion}` },
  results,
  derived: {
    handle_fresh_added_us: added("handle_fresh", "mean_us"),
    handle_replay_added_us: added("handle_replay", "mean_us"),
    ratio_fresh: rateRatio("idemkit_claim_complete", "peer_fresh", "mean_us"),
    ratio_replay: rateRatio("idemkit_replay", "peer_replay", "mean_us"),
    // The same from the p50s: steadier than the means on a machine shared with other work.
    handle_fresh_added_p50_us: added("handle_fresh", "p50_us"),
    handle_replay_added_p50_us: added("handle_replay", "p50_us"),
    ratio_fresh_p50: rateRatio("idemkit_claim_complete", "peer_fresh", "p50_us"),
    ratio_replay_p50: rateRatio("idemkit_replay", "peer_replay", "p50_us"),
    handle_fresh_own_us: own("mean_us"),
    handle_fresh_own_p50_us: own("p50_us"),
  },
}));
