// SQLite through better-sqlite3 (Node) or bun:sqlite (Bun): both have a synchronous
// `prepare(sql).run/get` API, so the adapter answers synchronously (no promise: the
// engine takes no await hop on it). Claims are one statement each: INSERT … ON CONFLICT DO
// NOTHING (insert-if-absent) and UPDATE … WHERE version = ? (compare-and-set), so
// they stay atomic even when several processes share the database file.
//
// Local writes (`updateWith`): the compare-and-set and the caller's synchronous
// `local(db)` run in one `db.transaction(...)` on this connection, `local` only
// after the compare-and-set changed the row, so the business write and the
// record's completion commit together or not at all.
//
// Durability: a claim or completion is acknowledged once its statement returns, so
// the commit must survive a power loss. With WAL and `synchronous=NORMAL` (a common
// tuning) the last commits can roll back; the adapter therefore sets
// `synchronous=FULL` on its connection when it is lower, and refuses a file database
// without a rollback journal (`journal_mode=OFF` or `MEMORY`), which a crash can
// corrupt. An in-memory database is a test setup and is accepted as it is.
//
// Contention: bun:sqlite waits for no lock by default (busy timeout 0), so a second
// process writing the file would make a claim fail with SQLITE_BUSY at once. The
// adapter sets a busy timeout (default 5 s) when none is set; better-sqlite3's own
// `timeout` option (default 5 s) is kept.

import { dueOf, firstVersion, pageOf, scanLimit } from "./gc-index.js";
import { checkTableName } from "./table-name.js";
import { requireLocal, runLocalSync } from "./local-writes.js";
import { answeringSynchronously } from "./synchronous.js";
import { IdemkitError } from "../errors.js";

const DEFAULT_BUSY_TIMEOUT_MS = 5000;
// PRAGMA synchronous: 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA.
const SYNCHRONOUS_FULL = 2;
const SYNCHRONOUS_EXTRA = 3;

/** The single value a `PRAGMA name` query returns (better-sqlite3 and bun:sqlite both give a row object). */
function pragma(db, name) {
  const row = db.prepare(`PRAGMA ${name}`).get();
  return row === undefined || row === null ? undefined : Object.values(row)[0];
}

/** An in-memory (or temporary) main database has no file name. */
function inMemory(db) {
  const main = db.prepare("PRAGMA database_list").all().find((row) => row.name === "main");
  return main === undefined || main.file === "" || main.file === null;
}

function makeDurable(db, options) {
  const journal = String(pragma(db, "journal_mode")).toLowerCase();
  if ((journal === "off" || journal === "memory") && !inMemory(db)) {
    throw new TypeError(
      `sqliteAdapter: the database runs with journal_mode=${journal}, so a crash can lose or corrupt acknowledged records; use journal_mode=WAL (or DELETE)`,
    );
  }
  // Set explicitly even when FULL is reported: until a connection sets it, SQLite
  // applies its compiled WAL default (NORMAL in better-sqlite3's build) at the first
  // transaction in WAL mode, whatever the pragma said before. EXTRA is kept.
  if (Number(pragma(db, "synchronous")) < SYNCHRONOUS_EXTRA) db.exec("PRAGMA synchronous = FULL");
  const synchronous = Number(pragma(db, "synchronous"));
  if (synchronous < SYNCHRONOUS_FULL && !inMemory(db)) {
    throw new TypeError(
      `sqliteAdapter: synchronous=${synchronous} could not be raised to FULL, so a power loss can roll back acknowledged records`,
    );
  }
  const busyTimeoutMs = options.busyTimeoutMs;
  if (busyTimeoutMs !== undefined && (!Number.isSafeInteger(busyTimeoutMs) || busyTimeoutMs < 0)) {
    throw new TypeError("sqliteAdapter: busyTimeoutMs must be a non-negative integer");
  }
  if (busyTimeoutMs !== undefined || Number(pragma(db, "busy_timeout")) === 0) {
    db.exec(`PRAGMA busy_timeout = ${busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS}`);
  }
}

/** Whether `table` has the gc_due_at column (tables created before GC existed do not). */
function hasGcColumn(db, table) {
  return db.prepare(`PRAGMA table_info(${table})`).all().some((column) => column.name === "gc_due_at");
}

/**
 * @param {{ prepare(sql: string): any, exec(sql: string): any }} db a better-sqlite3 or bun:sqlite Database
 * @param {{ table?: string, busyTimeoutMs?: number }} [options]
 * @returns {import("../index.d.ts").Adapter}
 */
export function sqliteAdapter(db, options) {
  options ??= {};
  const table = options.table ?? "idemkit_records";
  checkTableName(table);
  if (typeof db?.prepare !== "function" || typeof db?.exec !== "function") {
    throw new TypeError("sqliteAdapter expects a better-sqlite3 or bun:sqlite Database");
  }
  makeDurable(db, options);
  db.exec(
    `CREATE TABLE IF NOT EXISTS ${table} (id TEXT PRIMARY KEY NOT NULL, record BLOB NOT NULL, version INTEGER NOT NULL, gc_due_at INTEGER) WITHOUT ROWID`,
  );
  // A table from before GC: the column is added with DEFAULT 0, so every row
  // written before is due at once and the first GC pass decodes it and indexes its
  // real due time (see createIdempotency's gc). Another process may add it first.
  if (!hasGcColumn(db, table)) {
    try {
      db.exec(`ALTER TABLE ${table} ADD COLUMN gc_due_at INTEGER DEFAULT 0`);
    } catch (err) {
      if (!hasGcColumn(db, table)) throw err;
    }
  }
  db.exec(`CREATE INDEX IF NOT EXISTS ${table}_gc_due ON ${table} (gc_due_at, id) WHERE gc_due_at IS NOT NULL`);
  const select = db.prepare(`SELECT record, version FROM ${table} WHERE id = ?`);
  const insert = db.prepare(
    `INSERT INTO ${table} (id, record, version, gc_due_at) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
  );
  const update = db.prepare(
    `UPDATE ${table} SET record = ?, version = version + 1, gc_due_at = ? WHERE id = ? AND version = ?`,
  );
  const remove = db.prepare(`DELETE FROM ${table} WHERE id = ? AND version = ?`);
  const scan = db.prepare(
    `SELECT id, record, version, gc_due_at FROM ${table} WHERE gc_due_at <= ? AND (gc_due_at, id) > (?, ?) ORDER BY gc_due_at, id LIMIT ?`,
  );
  // better-sqlite3 and bun:sqlite both roll the transaction back when its function
  // throws; a refused compare-and-set changed nothing, so it commits nothing. Made
  // on first use: only updateWith needs `db.transaction`.
  let updateWithin;
  function localTransaction() {
    if (typeof db.transaction !== "function") {
      throw new IdemkitError("local-unsupported", "sqliteAdapter: this database has no transaction(fn), so local writes cannot commit with a record");
    }
    return (updateWithin ??= db.transaction((record, due, id, version, local) => {
      if (update.run(record, due, id, version).changes !== 1) return null;
      return { version: version + 1, result: runLocalSync(local, db) };
    }));
  }
  return {
    name: "sqliteAdapter",
    ...answeringSynchronously({
      get(id) {
        const row = select.get(id);
        if (row === undefined || row === null) return null;
        return { record: new Uint8Array(row.record), version: Number(row.version) };
      },
      insert(id, record, meta) {
        const version = firstVersion();
        return insert.run(id, record, version, dueOf(meta)).changes === 1 ? { version } : null;
      },
      update(id, record, version, meta) {
        return update.run(record, dueOf(meta), id, version).changes === 1 ? { version: version + 1 } : null;
      },
      updateWith(id, record, version, meta, local) {
        requireLocal(typeof local === "function", "sqliteAdapter", "a synchronous function (db) => result");
        return localTransaction()(record, dueOf(meta), id, version, local);
      },
      delete(id, version) {
        return remove.run(id, version).changes === 1;
      },
      scan(options) {
        const { gcDueBefore, limit, after } = scanLimit(options);
        const rows = scan.all(gcDueBefore, after?.gcDueAt ?? -1, after?.id ?? "", limit + 1);
        return pageOf(rows, limit, (bytes) => new Uint8Array(bytes));
      },
    }),
  };
}
