// Deno KV. Claims are atomic operations checked on the versionstamp: a check with
// `versionstamp: null` is insert-if-absent, a check with the versionstamp read is
// compare-and-set. A KV value is at most 64 KiB, so a record (which holds the stored
// response body) must fit in that: the adapter says so in `maxRecordBytes`, and
// createIdempotency keeps no body that would make a record larger (the response is
// answered once and a retry gets 410 response-expired).

// Local (SQLite-backed) KV refuses a commit with "database is locked" while another
// connection to the same file writes. A refused commit changed nothing and its check
// is evaluated again on retry, so retrying it is safe; after the last attempt the
// error reaches idemkit, which answers 503 and executes nothing.
const LOCKED_RETRIES = 10; // about 1 s of backoff in all

// Deno KV's limit applies to the serialized value: 65 536 bytes, of which the V8
// serialization of a Uint8Array takes a few for its tags and length.
const KV_MAX_VALUE_BYTES = 64 * 1024;
const SERIALIZATION_HEADROOM = 64;

async function commit(build) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await build().commit();
    } catch (err) {
      if (attempt >= LOCKED_RETRIES || !/database is locked/i.test(String(err?.message))) throw err;
      await new Promise((resolve) => setTimeout(resolve, 2 ** attempt + Math.random() * 5));
    }
  }
}

/**
 * @param {Deno.Kv} kv
 * @param {{ prefix?: Deno.KvKey }} [options]
 * @returns {import("../index.d.ts").Adapter}
 */
export function denoKvAdapter(kv, options = {}) {
  const prefix = options.prefix ?? ["idemkit"];
  if (typeof kv?.atomic !== "function") throw new TypeError("denoKvAdapter expects a Deno.Kv");
  const keyOf = (id) => [...prefix, id];
  return {
    maxRecordBytes: KV_MAX_VALUE_BYTES - SERIALIZATION_HEADROOM,
    async get(id) {
      const entry = await kv.get(keyOf(id));
      return entry.versionstamp === null ? null : { record: entry.value, version: entry.versionstamp };
    },
    async insert(id, record) {
      const key = keyOf(id);
      const result = await commit(() => kv.atomic().check({ key, versionstamp: null }).set(key, record));
      return result.ok ? { version: result.versionstamp } : null;
    },
    async update(id, record, version) {
      const key = keyOf(id);
      const result = await commit(() => kv.atomic().check({ key, versionstamp: version }).set(key, record));
      return result.ok ? { version: result.versionstamp } : null;
    },
  };
}
