// Cloudflare D1. Each claim is one SQL statement, which D1 runs atomically on the
// database's single primary: INSERT … ON CONFLICT DO NOTHING (insert-if-absent) and
// UPDATE … WHERE version = ? (compare-and-set); `meta.changes` says who won.

const TABLE = /^[A-Za-z_][A-Za-z0-9_]*$/;

// D1 refuses a row (and a BLOB) above 2 000 000 bytes. The id and version take the
// rest of the row; createIdempotency keeps no response body that would make a
// record larger (the response is answered once and a retry gets 410).
const D1_MAX_ROW_BYTES = 2_000_000;
const ROW_HEADROOM = 1024;

/** The schema, for a migration file (`wrangler d1 migrations`) instead of lazy creation. */
export function d1Schema(table = "idemkit_records") {
  if (!TABLE.test(table)) throw new TypeError(`invalid table name ${JSON.stringify(table)}`);
  return `CREATE TABLE IF NOT EXISTS ${table} (id TEXT PRIMARY KEY NOT NULL, record BLOB NOT NULL, version INTEGER NOT NULL) WITHOUT ROWID`;
}

function toBytes(value) {
  if (value instanceof Uint8Array) return value;
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (Array.isArray(value)) return Uint8Array.from(value);
  throw new TypeError("D1 returned a record that is not a BLOB");
}

/**
 * @param {D1Database} d1 the D1 binding (`env.DB`)
 * @param {{ table?: string, createTable?: boolean }} [options]
 * @returns {import("../index.d.ts").Adapter}
 */
export function d1Adapter(d1, options = {}) {
  const table = options.table ?? "idemkit_records";
  const schema = d1Schema(table);
  if (typeof d1?.prepare !== "function") throw new TypeError("d1Adapter expects a D1 database binding");
  let ready = options.createTable === false ? Promise.resolve() : null;
  const ensure = () => (ready ??= d1.prepare(schema).run().catch((err) => {
    ready = null;
    throw err;
  }));
  return {
    maxRecordBytes: D1_MAX_ROW_BYTES - ROW_HEADROOM,
    async get(id) {
      await ensure();
      const row = await d1.prepare(`SELECT record, version FROM ${table} WHERE id = ?`).bind(id).first();
      return row === null ? null : { record: toBytes(row.record), version: Number(row.version) };
    },
    async insert(id, record) {
      await ensure();
      const result = await d1
        .prepare(`INSERT INTO ${table} (id, record, version) VALUES (?, ?, 1) ON CONFLICT (id) DO NOTHING`)
        .bind(id, record)
        .run();
      return result.meta.changes === 1 ? { version: 1 } : null;
    },
    async update(id, record, version) {
      await ensure();
      const result = await d1
        .prepare(`UPDATE ${table} SET record = ?, version = version + 1 WHERE id = ? AND version = ?`)
        .bind(record, id, version)
        .run();
      return result.meta.changes === 1 ? { version: version + 1 } : null;
    },
  };
}
