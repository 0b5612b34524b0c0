// Invariant 6: the wasm build gives byte-identical canonical JSON, fingerprints and
// record encodings to the native build. Canonical JSON and fingerprints are
// compared with the Rust CLI (`idemkit canonicalize`, `idemkit fingerprint`) on all
// of core/tests/data/jcs and on 2,000 seeded random documents; records with the
// native state machine (wasm/examples/native_records.rs) over seeded scenarios.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as idemkit from "idemkit";
import * as glue from "../../pkg/idemkit_wasm.js";
import independent from "canonicalize";
import { randomDocuments, rng } from "../random-json.js";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const jcs = join(root, "core", "tests", "data", "jcs");
const SEED = 0x1de4c17;
const RANDOM_DOCS = 2000;

assert.ok(existsSync(jcs), `the JCS test data must be at ${jcs} (checked into the repository)`);

// The native binaries, built the way `cargo test` builds them.
execFileSync("cargo", ["build", "--locked", "--quiet", "-p", "idemkit", "--bin", "idemkit", "-p", "idemkit-wasm", "--example", "native_records"], { cwd: root, stdio: "inherit" });
const targetDir = JSON.parse(execFileSync("cargo", ["metadata", "--format-version", "1", "--no-deps"], { cwd: root, encoding: "utf8" })).target_directory;
const cli = join(targetDir, "debug", "idemkit");
const nativeRecords = join(targetDir, "debug", "examples", "native_records");

/** Runs a native command with `input` on stdin. */
function native(command, args, input) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ["pipe", "pipe", "pipe"] });
    const out = [];
    const err = [];
    child.stdout.on("data", (d) => out.push(d));
    child.stderr.on("data", (d) => err.push(d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString("utf8") }));
    child.stdin.end(input);
  });
}

/** Maps `fn` over `items` with at most `width` in flight. */
async function pool(items, width, fn) {
  const results = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) {
        const i = next++;
        results[i] = await fn(items[i], i);
      }
    }),
  );
  return results;
}

/** The wasm result as the CLI would print it: the bytes, or the error code. */
function wasmResult(fn) {
  try {
    return { ok: Buffer.from(fn()) };
  } catch (err) {
    if (!(err instanceof idemkit.IdemkitError)) throw err;
    return { code: err.code };
  }
}

function cliResult({ code, stdout, stderr }, what) {
  if (code === 0) return { ok: stdout };
  const m = /\[([a-z0-9-]+)\]\s*$/.exec(stderr);
  assert.ok(code === 65 && m, `${what}: unexpected CLI failure (exit ${code}): ${stderr}`);
  return { code: m[1] };
}

function same(wasm, cliOut, what) {
  if (wasm.ok && cliOut.ok) {
    assert.ok(wasm.ok.equals(cliOut.ok), `${what}: wasm ${wasm.ok.toString("hex")} != native ${cliOut.ok.toString("hex")}`);
  } else {
    assert.deepEqual(wasm, cliOut, what);
  }
}

/** Every JCS input: official vectors, the edge cases, and the number corpora as arrays. */
function jcsInputs() {
  const inputs = [];
  for (const f of readdirSync(join(jcs, "input")).sort()) {
    inputs.push({ name: `input/${f}`, bytes: readFileSync(join(jcs, "input", f)), expect: { rfc8785: readFileSync(join(jcs, "output", f)) } });
  }
  const edge = JSON.parse(readFileSync(join(jcs, "edge_cases.json"), "utf8"));
  for (const c of edge.cases) {
    const expect = {};
    if (c.strict.result === "ok") expect.strict = Buffer.from(c.strict.output_hex, "hex");
    else expect.strictRejects = true;
    inputs.push({ name: `edge/${c.id}`, bytes: Buffer.from(c.input_hex, "hex"), expect });
  }
  for (const f of readdirSync(join(jcs, "numbers")).sort()) {
    const rows = readFileSync(join(jcs, "numbers", f), "utf8").trim().split("\n");
    for (let start = 0; start < rows.length; start += 500) {
      const chunk = rows.slice(start, start + 500).map((row) => row.split(","));
      const doubles = chunk.map(([bits]) => {
        const view = new DataView(new ArrayBuffer(8));
        view.setBigUint64(0, BigInt(`0x${bits}`));
        return view.getFloat64(0);
      });
      const expected = Buffer.from(`[${chunk.map(([, out]) => out).join(",")}]`);
      // Canonical spellings (strict must keep them) and 17-digit spellings
      // (plain RFC 8785 must round them to the same output).
      inputs.push({ name: `${f}[${start}] canonical`, bytes: expected, expect: { strict: expected, rfc8785: expected } });
      const long = Buffer.from(`[${doubles.map((d) => (Object.is(d, -0) ? "-0.0" : d.toPrecision(17))).join(",")}]`);
      inputs.push({ name: `${f}[${start}] 17 digits`, bytes: long, expect: { rfc8785: expected } });
    }
  }
  return inputs;
}

const profiles = ["strict", "rfc8785"];

test("canonicalize: wasm == idemkit canonicalize on all of testdata/jcs, both profiles", async () => {
  const inputs = jcsInputs();
  const jobs = inputs.flatMap((input) => profiles.map((profile) => ({ input, profile })));
  await pool(jobs, 4, async ({ input, profile }) => {
    const what = `${input.name} (${profile})`;
    const wasm = wasmResult(() => idemkit.canonicalize(new Uint8Array(input.bytes), { profile }));
    same(wasm, cliResult(await native(cli, ["canonicalize", "--profile", profile, "-"], input.bytes), what), what);
    const expected = input.expect[profile];
    if (expected) assert.ok(wasm.ok?.equals(expected), `${what}: differs from the test data's expected output`);
    if (profile === "strict" && input.expect.strictRejects) assert.ok(wasm.code, `${what}: strict must refuse`);
  });
  console.log(`jcs: ${inputs.length} inputs × 2 profiles compared with the CLI`);
});

test(`canonicalize: wasm == CLI on ${RANDOM_DOCS} seeded random documents`, async () => {
  const docs = randomDocuments(SEED, RANDOM_DOCS);
  let accepted = 0;
  await pool(docs, 4, async (doc, i) => {
    const bytes = Buffer.from(doc, "utf8");
    const profile = i % 5 === 4 ? "rfc8785" : "strict";
    const what = `random #${i} (${profile}): ${doc.slice(0, 80)}`;
    const wasm = wasmResult(() => idemkit.canonicalize(new Uint8Array(bytes), { profile }));
    same(wasm, cliResult(await native(cli, ["canonicalize", "--profile", profile, "-"], bytes), what), what);
    if (wasm.ok) {
      accepted++;
      // An independent RFC 8785 implementation (npm canonicalize) agrees on every
      // document the strict profile accepts.
      if (profile === "strict") assert.equal(wasm.ok.toString("utf8"), independent(JSON.parse(doc)), `${what}: npm canonicalize differs`);
    }
  });
  console.log(`random: ${docs.length} documents, ${accepted} accepted, ${docs.length - accepted} refused, all equal to the CLI`);
  assert.ok(accepted > RANDOM_DOCS / 2 && accepted < RANDOM_DOCS, "the corpus exercises both acceptance and refusal");
});

function fingerprintArgs(options) {
  const args = ["fingerprint", "--operation", options.operation, "--schema-version", String(options.schemaVersion), "--content-type", options.contentType];
  for (const p of options.include ?? []) args.push("--include", p);
  for (const p of options.exclude ?? []) args.push("--exclude", p);
  // `--name=value`: a value that starts with `-` stays a value.
  if (options.method !== undefined) args.push(`--method=${options.method}`, `--path=${options.path}`);
  if (options.query !== undefined) args.push(`--query=${options.query}`);
  if (options.ignoreQuery) args.push("--ignore-query");
  for (const n of options.ignoreQueryParams ?? []) args.push(`--ignore-query-param=${n}`);
  return [...args, "-"];
}

/** Half the jobs carry a request line (scheme 2), with the query shapes that matter. */
function randomRequestLine(r) {
  if (r.chance(0.5)) return {};
  const line = {
    method: r.pick(["POST", "PUT", "post", "PATCH"]),
    path: r.pick(["/accounts/A/withdraw", "/accounts/B/withdraw", "/", "/a%2Fb/c", "/caf%C3%A9", "/é/ü", "/-x"]),
  };
  if (r.chance(0.8)) {
    line.query = r.pick(["", "?", "a=1&b=2", "b=2&a=1", "?a=1&a=2", "a=2&a=1", "q=a+b&q=a%20b", "x=%zz", "x=%ff", "utm_source=mail&id=7", "&&a", "é=ü"]);
  }
  if (r.chance(0.2)) line.ignoreQuery = true;
  else if (r.chance(0.25)) line.ignoreQueryParams = r.pick([["utm_source"], ["a", "utm_source"], ["q"]]);
  return line;
}

test(`fingerprint: wasm == idemkit fingerprint on testdata/jcs and ${RANDOM_DOCS} random documents`, async () => {
  const r = rng(SEED ^ 0xf00d);
  const bodies = [...jcsInputs().filter((i) => !i.name.startsWith("es6") && !i.name.startsWith("rfc8785_")).map((i) => i.bytes), ...randomDocuments(SEED + 1, RANDOM_DOCS).map((d) => Buffer.from(d))];
  const pointerChoices = [[], [], ["/a"], ["/b", "/a/0"], ["/request_id"], [""], ["/~0x/~1y"]];
  const jobs = bodies.map((body) => ({
    body,
    options: {
      operation: r.pick(["", "payments.capture", "appointments.create", "é"]),
      schemaVersion: r.pick([1, 1, 2, 4294967295]),
      contentType: r.pick(["application/json", "application/json", "application/problem+json; charset=utf-8", "application/x-www-form-urlencoded", "text/plain"]),
      ...(r.chance(0.5) ? { include: r.pick(pointerChoices) } : { exclude: r.pick(pointerChoices).filter((p) => p !== "") }),
      ...randomRequestLine(r),
    },
  }));
  let computed = 0;
  await pool(jobs, 4, async ({ body, options }, i) => {
    const what = `fingerprint #${i} ${JSON.stringify(options)}`;
    const jsOptions = { ...options };
    const wasm = wasmResult(() => Buffer.from(idemkit.fingerprint(new Uint8Array(body), jsOptions) + "\n"));
    const out = await native(cli, fingerprintArgs(options), body);
    if (out.code === 64) {
      // A usage error (pointer syntax, selection on a non-JSON body) is a refusal too.
      assert.ok(wasm.code, `${what}: the CLI refused the options (${out.stderr}) but wasm accepted them`);
      const m = /\[([a-z0-9-]+)\]\s*$/.exec(out.stderr);
      assert.equal(wasm.code, m?.[1], what);
      return;
    }
    same(wasm, cliResult(out, what), what);
    if (wasm.ok) computed++;
  });
  const withLine = jobs.filter((j) => j.options.method !== undefined).length;
  console.log(`fingerprint: ${jobs.length} bodies (${withLine} with a request line), ${computed} fingerprints equal to the CLI, the rest refused identically`);
  assert.ok(computed > jobs.length / 3);
  assert.ok(withLine > jobs.length / 4 && withLine < jobs.length * 3 / 4, "both schemes are compared");
});

// ---- record encoding ----------------------------------------------------------

const hex = (bytes) => Buffer.from(bytes).toString("hex");

function randomPolicy(r) {
  return {
    leaseMs: r.pick([1000, 30000]),
    replayWindowMs: r.pick([5000, 86_400_000]),
    recordWindowMs: r.pick([10_000, 604_800_000]),
    effect: r.pick(["local", "external"]),
    mismatchStatus: r.pick([422, 409]),
    store: r.pick(["definitive", "everything"]),
  };
}

function randomResponse(r) {
  const bytes = (n) => Buffer.from(Array.from({ length: n }, () => r.int(256)));
  return {
    status: r.pick([200, 201, 404, 409, 429, 500, 503]),
    headers: Array.from({ length: r.int(3) }, (_, i) => [r.pick(["content-type", "location", "x-a"]) + i, hex(bytes(r.int(20)))]),
    body: r.chance(0.2) ? null : hex(bytes(r.int(40))),
    resourceRef: r.chance(0.5) ? null : r.pick(["pay_1", "appt_81", "é"]),
  };
}

const toWasmResponse = (resp) => ({
  status: resp.status,
  headers: resp.headers.map(([n, v]) => [n, new Uint8Array(Buffer.from(v, "hex"))]),
  body: resp.body === null ? null : new Uint8Array(Buffer.from(resp.body, "hex")),
  resourceRef: resp.resourceRef,
});

/** Seeded scenarios: claims by two fingerprints, transitions with current and stale tokens. */
function scenarios(seed, count) {
  const r = rng(seed);
  // Scheme 1 (body only) and scheme 2 (request line too, with its body-only part):
  // the machine compares a scheme-2 request with a scheme-1 record under scheme 1.
  const line = (path) => ({ method: "POST", path });
  const fps = [
    ...['{"a":1}', '{"a":2}'].map((body) => ({ scheme: 1, value: idemkit.fingerprint(body), bodyOnly: null })),
    ...[["/x", '{"a":1}'], ["/y", '{"a":1}'], ["/x", '{"a":2}']].map(([path, body]) => ({
      scheme: 2,
      value: idemkit.fingerprint(body, line(path)),
      bodyOnly: idemkit.fingerprint(body),
    })),
  ];
  const out = [];
  for (let s = 0; s < count; s++) {
    let now = 1_700_000_000_000 + r.int(1e9);
    const steps = [];
    for (let i = 0, n = 2 + r.int(8); i < n; i++) {
      now += r.pick([0, 1, 500, 1500, 6000, 40_000, 700_000_000]);
      const policy = randomPolicy(r);
      const op = i === 0 ? "claim" : r.pick(["claim", "claim", "complete", "release", "markUnknown", "renew", "resolve"]);
      const step = { op, now, policy };
      if (op === "claim") Object.assign(step, { fingerprint: r.pick(fps), owner: r.pick(["w-1", "w-2", "é"]) });
      else step.token = 1 + r.int(4);
      if (op === "complete") step.response = randomResponse(r);
      if (op === "markUnknown") step.reason = r.pick(["timeout", "", "bank said 502"]);
      if (op === "resolve") step.applied = r.chance(0.5) ? null : randomResponse(r);
      steps.push(step);
    }
    out.push(steps);
  }
  return out;
}

/** The steps through core's one entry point, `apply`, as the package runs them. */
function runInWasm(steps) {
  const lines = [];
  let current;
  const opOf = (s) => {
    switch (s.op) {
      case "claim": {
        const fp = s.fingerprint;
        return { op: "claim", fingerprint: fp.value, scheme: fp.scheme, bodyOnly: fp.bodyOnly ?? undefined, owner: s.owner };
      }
      case "complete": return { op: "complete", token: BigInt(s.token), response: toWasmResponse(s.response) };
      case "release": return { op: "release", token: BigInt(s.token) };
      case "markUnknown": return { op: "markUnknown", token: BigInt(s.token), reason: s.reason };
      case "renew": return { op: "renew", token: BigInt(s.token) };
      case "resolve": return { op: "resolve", applied: s.applied === null ? null : toWasmResponse(s.applied) };
      default: throw new Error(`unknown step ${s.op}`);
    }
  };
  for (const s of steps) {
    try {
      const { write } = glue.apply(current, opOf(s), s.policy, s.now);
      if (s.op === "claim") {
        lines.push(write === null ? "-" : hex(write));
        if (write !== null) current = write;
        continue;
      }
      // A transition that changes nothing writes nothing: the record stays.
      if (write !== null) current = write;
      lines.push(hex(current));
    } catch (err) {
      if (err?.name !== "IdemkitError") throw err;
      lines.push(`error:${err.code}`);
    }
  }
  lines.push("end");
  return lines;
}

test("record encoding: wasm transitions write the same bytes as the native state machine", async () => {
  const all = scenarios(SEED, 500);
  const wasmLines = all.flatMap(runInWasm);
  const out = await native(nativeRecords, [], JSON.stringify(all));
  assert.equal(out.code, 0, out.stderr);
  const nativeLines = out.stdout.toString("utf8").trimEnd().split("\n");
  assert.equal(wasmLines.length, nativeLines.length);
  for (let i = 0; i < wasmLines.length; i++) assert.equal(wasmLines[i], nativeLines[i], `line ${i}`);
  const writes = wasmLines.filter((l) => /^[0-9a-f]+$/.test(l)).length;
  const refusals = wasmLines.filter((l) => l.startsWith("error:")).length;
  console.log(`records: ${all.length} scenarios, ${writes} records written, ${refusals} refusals, all identical to native`);
  assert.ok(writes > 500 && refusals > 50, "the scenarios exercise writes and refusals");
});
