// Deno: the conformance suite over Deno KV (and the memory adapter), the
// local-transaction cases over the memory adapter and their refusal over Deno KV
// (no updateWith), retries that wait (polling Deno KV), then 50 concurrent handle
// calls on one Deno KV database. Run with
// `deno run --unstable-kv --allow-read=. --allow-write=<tmp> test/deno/run.js`
// (the package itself needs no permission: its .wasm is embedded).
import * as idemkit from "idemkit";
import { run } from "../harness.js";
import { conformanceCases } from "../conformance.js";
import { journalCases } from "../journal.js";
import { checkConcurrency, concurrentHandles, waitingRetries } from "../concurrency.js";
import { legacyRowsAreCollected } from "../gc-legacy.js";
import { localTransactionCases, localUnsupportedCases, memoryOrders, ordersWithout } from "../local-transactions.js";

const started = Date.now();
const kvs = [];
const openKv = async () => {
  const kv = await Deno.openKv(":memory:");
  kvs.push(kv);
  return kv;
};

const cases = [
  ...conformanceCases(idemkit, () => idemkit.memoryAdapter()).map(([n, f]) => [`memory: ${n}`, f]),
  ...conformanceCases(idemkit, async () => idemkit.denoKvAdapter(await openKv())).map(([n, f]) => [`deno kv: ${n}`, f]),
  ...journalCases(idemkit, () => idemkit.memoryAdapter()).map(([n, f]) => [`memory: ${n}`, f]),
  ...journalCases(idemkit, async () => idemkit.denoKvAdapter(await openKv(), { prefix: ["journal"] })).map(([n, f]) => [`deno kv: ${n}`, f]),
  ...localTransactionCases(idemkit, () => memoryOrders(idemkit)).map(([n, f]) => [`memory: ${n}`, f]),
  ...localUnsupportedCases(idemkit, async () => ordersWithout(idemkit.denoKvAdapter(await openKv()))).map(([n, f]) => [`deno kv: ${n}`, f]),
  ["deno kv: values the previous adapter wrote (bare bytes, no GC key) are indexed by scan and collected", async () => {
    const kv = await openKv();
    const total = await legacyRowsAreCollected(idemkit, idemkit.denoKvAdapter(kv), async (id, record) => {
      await kv.set(["idemkit", id], record);
    });
    console.log(`deno kv legacy values: ${JSON.stringify(total)}`);
  }],
  ["deno kv: retries that wait poll the record and are answered with the replay", async () => {
    const result = await waitingRetries(idemkit, idemkit.denoKvAdapter(await openKv()));
    console.log(`deno kv waiting: ${JSON.stringify(result)}`);
  }],
  ["deno kv: 50 concurrent handle calls with one key execute once", async () => {
    const dir = await Deno.makeTempDir();
    try {
      // A file-backed KV, as a deployed app has; two connections share it.
      const a = await Deno.openKv(`${dir}/kv.sqlite`);
      const b = await Deno.openKv(`${dir}/kv.sqlite`);
      kvs.push(a, b);
      const adapters = [idemkit.denoKvAdapter(a), idemkit.denoKvAdapter(b)];
      let i = 0;
      const alternating = {
        get: (id) => adapters[i++ % 2].get(id),
        insert: (id, r) => adapters[i++ % 2].insert(id, r),
        update: (id, r, v) => adapters[i++ % 2].update(id, r, v),
      };
      const result = await concurrentHandles(idemkit, alternating);
      console.log(`deno kv: ${JSON.stringify(result)}`);
      checkConcurrency(result);
    } finally {
      for (const kv of kvs.splice(0)) kv.close();
      await Deno.remove(dir, { recursive: true });
    }
  }],
];

const { passed, failed } = await run(cases, (line) => console.log(line));
for (const kv of kvs) kv.close();
console.log(`deno ${Deno.version.deno}: ${((Date.now() - started) / 1000).toFixed(1)} s`);
console.log(`${passed} passed, ${failed} failed`);
if (failed > 0 || passed === 0) Deno.exit(1);
