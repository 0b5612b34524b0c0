// `idemkit probe` (the Rust CLI) against the npm handler served by Node over real
// HTTP: every required check passes. The handler answers with a fresh id per
// execution (and takes 50 ms), so a second execution is visible to the probe.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { createServer } from "node:http";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createIdempotency, memoryAdapter } from "idemkit";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
execFileSync("cargo", ["build", "--locked", "--quiet", "-p", "idemkit", "--bin", "idemkit"], { cwd: root, stdio: "inherit" });
const targetDir = JSON.parse(execFileSync("cargo", ["metadata", "--format-version", "1", "--no-deps"], { cwd: root, encoding: "utf8" })).target_directory;
const cli = join(targetDir, "debug", "idemkit");

let server;
let url;
let executions = 0;

before(async () => {
  const idem = createIdempotency({
    adapter: memoryAdapter(),
    operation: "payments.capture",
    effect: "external",
    tenant: (request) => request.headers.get("authorization")?.replace(/^Bearer\s+/i, "") || null,
  });
  const capture = async (request) => {
    const body = await request.json();
    await new Promise((resolve) => setTimeout(resolve, 50));
    executions++;
    return Response.json({ id: `pay_${executions}`, amount: body.amount }, { status: 201 });
  };
  server = createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const request = new Request(`http://${req.headers.host}${req.url}`, {
      method: req.method,
      headers: Object.entries(req.headers).flatMap(([k, v]) => (Array.isArray(v) ? v.map((x) => [k, x]) : [[k, v]])),
      body: Buffer.concat(chunks),
    });
    const response = await idem.handle(request, capture);
    res.writeHead(response.status, [...response.headers].flat());
    res.end(Buffer.from(await response.arrayBuffer()));
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${server.address().port}/payments`;
});
after(() => new Promise((resolve) => server.close(resolve)));

function probe(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(cli, ["probe", ...args], { stdio: ["ignore", "pipe", "pipe"] });
    const out = [];
    const err = [];
    child.stdout.on("data", (d) => out.push(d));
    child.stderr.on("data", (d) => err.push(d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8") }));
  });
}

test("idemkit probe passes every required check against the npm handler", async () => {
  const out = await probe([
    url,
    "-H", "Authorization: Bearer acme",
    "-d", '{"amount":1200,"currency":"EUR"}',
    "--other-tenant-header", "Authorization: Bearer globex",
    "--json",
  ]);
  const report = JSON.parse(out.stdout);
  const result = Object.fromEntries(report.checks.map((c) => [c.id, c]));
  for (const id of ["key-required", "key-too-long", "replay", "mismatch", "concurrent", "tenant-isolation", "replay-marker", "equivalent-body", "problem-json"]) {
    assert.equal(result[id]?.result, "pass", `${id}: ${JSON.stringify(result[id])}`);
  }
  assert.equal(out.code, 0, out.stderr);
  assert.equal(report.summary.fail, 0);
  // acme: the replay check's request and the concurrent one; globex: the control
  // and its own run of the first key.
  assert.equal(executions, 4);
  console.log(`probe: ${report.checks.map((c) => `${c.id} ${c.result}`).join(", ")}`);
});
