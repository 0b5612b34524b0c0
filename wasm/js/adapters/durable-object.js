// A Durable Object's storage (`this.ctx.storage`). The check and the write of each
// claim run inside one `storage.transaction()`, so they are atomic even if another
// request to the same object interleaves at an await.

/**
 * @param {DurableObjectStorage} storage
 * @param {{ prefix?: string }} [options]
 * @returns {import("../index.d.ts").Adapter}
 */
export function durableObjectAdapter(storage, options = {}) {
  const prefix = options.prefix ?? "idemkit:";
  if (typeof storage?.transaction !== "function") {
    throw new TypeError("durableObjectAdapter expects a Durable Object's ctx.storage");
  }
  return {
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
