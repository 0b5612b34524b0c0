// Deno KV. Claims are atomic operations checked on the versionstamp: a check with
// `versionstamp: null` is insert-if-absent, a check with the versionstamp read is
// compare-and-set. A KV value is at most 64 KiB, so a record (which holds the stored
// response body) must fit in that.

// Local (SQLite-backed) KV refuses a commit with "database is locked" while another
// connection to the same file writes. A refused commit changed nothing and its check
// is evaluated again on retry, so retrying it is safe; after the last attempt the
// error reaches idemkit, which answers 503 and executes nothing.
const LOCKED_RETRIES = 10; // about 1 s of backoff in all

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
