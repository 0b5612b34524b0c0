// A Durable Object's storage (`this.ctx.storage`). The check and the write of each
// claim run inside one `storage.transaction()`, so they are atomic even if another
// request to the same object interleaves at an await.
//
// A stored value is capped: 128 KiB with the key-value storage backend, 2 MB (key
// and value) with the SQLite backend. The adapter assumes the smaller cap unless
// told otherwise (`maxRecordBytes`), and createIdempotency keeps no response body
// that would make a record larger (answered once; a retry gets 410).
const KV_BACKEND_MAX_VALUE_BYTES = 128 * 1024;
// The value is `{ record, version }` in V8 serialization: tags, two member names,
// the Uint8Array's length and the version take a few dozen bytes.
const SERIALIZATION_HEADROOM = 256;

/**
 * @param {DurableObjectStorage} storage
 * @param {{ prefix?: string, maxRecordBytes?: number }} [options]
 * @returns {import("../index.d.ts").Adapter}
 */
export function durableObjectAdapter(storage, options = {}) {
  const prefix = options.prefix ?? "idemkit:";
  if (typeof storage?.transaction !== "function") {
    throw new TypeError("durableObjectAdapter expects a Durable Object's ctx.storage");
  }
  const maxRecordBytes = options.maxRecordBytes ?? KV_BACKEND_MAX_VALUE_BYTES - SERIALIZATION_HEADROOM;
  if (!Number.isSafeInteger(maxRecordBytes) || maxRecordBytes <= 0) {
    throw new TypeError("durableObjectAdapter: maxRecordBytes must be a positive integer");
  }
  return {
    maxRecordBytes,
    async get(id) {
      const row = await storage.get(prefix + id);
      return row === undefined ? null : { record: new Uint8Array(row.record), version: row.version };
    },
    async insert(id, record) {
      return storage.transaction(async (txn) => {
        if ((await txn.get(prefix + id)) !== undefined) return null;
        await txn.put(prefix + id, { record, version: 1 });
        return { version: 1 };
      });
    },
    async update(id, record, version) {
      return storage.transaction(async (txn) => {
        const row = await txn.get(prefix + id);
        if (row === undefined || row.version !== version) return null;
        await txn.put(prefix + id, { record, version: version + 1 });
        return { version: version + 1 };
      });
    },
  };
}
