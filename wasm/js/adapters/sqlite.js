// SQLite through better-sqlite3 (Node) or bun:sqlite (Bun): both have a synchronous
// `prepare(sql).run/get` API. Claims are one statement each: INSERT … ON CONFLICT DO
// NOTHING (insert-if-absent) and UPDATE … WHERE version = ? (compare-and-set), so
// they stay atomic even when several processes share the database file.

const TABLE = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * @param {{ prepare(sql: string): any, exec(sql: string): any }} db a better-sqlite3 or bun:sqlite Database
 * @param {{ table?: string }} [options]
 * @returns {import("../index.d.ts").Adapter}
 */
export function sqliteAdapter(db, options = {}) {
  const table = options.table ?? "idemkit_records";
  if (!TABLE.test(table)) throw new TypeError(`invalid table name ${JSON.stringify(table)}`);
  if (typeof db?.prepare !== "function" || typeof db?.exec !== "function") {
    throw new TypeError("sqliteAdapter expects a better-sqlite3 or bun:sqlite Database");
  }
  db.exec(
    `CREATE TABLE IF NOT EXISTS ${table} (id TEXT PRIMARY KEY NOT NULL, record BLOB NOT NULL, version INTEGER NOT NULL) WITHOUT ROWID`,
  );
  const select = db.prepare(`SELECT record, version FROM ${table} WHERE id = ?`);
  const insert = db.prepare(`INSERT INTO ${table} (id, record, version) VALUES (?, ?, 1) ON CONFLICT (id) DO NOTHING`);
  const update = db.prepare(`UPDATE ${table} SET record = ?, version = version + 1 WHERE id = ? AND version = ?`);
  return {
    async get(id) {
      const row = select.get(id);
      if (row === undefined || row === null) return null;
      return { record: new Uint8Array(row.record), version: Number(row.version) };
    },
    async insert(id, record) {
      return insert.run(id, record).changes === 1 ? { version: 1 } : null;
    },
    async update(id, record, version) {
      return update.run(record, id, version).changes === 1 ? { version: version + 1 } : null;
    },
  };
}
