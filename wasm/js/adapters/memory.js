// An in-process adapter: for tests, examples and single-process servers that may
// lose their records on restart. Each method runs to completion without awaiting,
// so insert-if-absent and compare-and-set are atomic on JavaScript's single thread.

/**
 * @returns {import("../index.d.ts").Adapter & { size(): number }}
 */
export function memoryAdapter() {
  /** @type {Map<string, { record: Uint8Array, version: number }>} */
  const records = new Map();
  return {
    async get(id) {
      const row = records.get(id);
      return row === undefined ? null : { record: row.record.slice(), version: row.version };
    },
    async insert(id, record) {
      if (records.has(id)) return null;
      records.set(id, { record: record.slice(), version: 1 });
      return { version: 1 };
    },
    async update(id, record, version) {
      const row = records.get(id);
      if (row === undefined || row.version !== version) return null;
      records.set(id, { record: record.slice(), version: version + 1 });
      return { version: version + 1 };
    },
    size() {
      return records.size;
    },
  };
}
