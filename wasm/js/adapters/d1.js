// Cloudflare D1. Each write is one SQL statement, which D1 runs atomically on the
// database's single primary: INSERT … ON CONFLICT DO NOTHING (insert-if-absent),
// UPDATE … WHERE version = ? (compare-and-set) and DELETE … WHERE version = ?
// (delete-if-version); `meta.changes` says who won. The indexed `gc_due_at`
// column (NULL: never due) lets GC read only the records whose time has come.
//
// Local writes (`updateWith`): D1 has no interactive transaction, but a batch is
// one: if any statement of `d1.batch([...])` fails, none is committed. The
// compare-and-set, a guard and the caller's bound statements go in one batch. A
// compare-and-set that matches no row is no error, so the guard makes it one: right
// after the UPDATE it evaluates `changes()` and, when that is not 1, asks
// `json_extract` for a path that is not a JSON path, a runtime error whose message
// carries the path (CAS_REFUSED). That error rolls back the caller's statements and
// tells a refused compare-and-set (answered null, like `update`) from a failed
// caller statement (local-writes-failed).
import { dueOf, firstVersion, pageOf, scanLimit } from "./gc-index.js";
import { checkTableName } from "./table-name.js";
import { localWritesFailed, requireLocal } from "./local-writes.js";

// D1 refuses a row (and a BLOB) above 2 000 000 bytes. The id, version and due time
// take the rest of the row; createIdempotency keeps no response body that would
// make a record larger (the response is answered once and a retry gets 410).
const D1_MAX_ROW_BYTES = 2_000_000;
const ROW_HEADROOM = 1024;

// D1's authorizer allows changes() and json_extract (not raise(), which SQLite
// allows only in triggers).
const CAS_REFUSED = "idemkit: compare-and-set refused";
const CAS_GUARD = `SELECT json_extract('{}', CASE WHEN changes() = 1 THEN '$' ELSE '${CAS_REFUSED}' END) AS cas_guard`;

/** Whether a failed batch failed at the guard (D1 puts SQLite's message in `message`, and in `cause`). */
function casRefused(err) {
  return [err?.message, err?.cause?.message].some((message) => String(message).includes(CAS_REFUSED));
}

function createStatements(table) {
  return [
    `CREATE TABLE IF NOT EXISTS ${table} (id TEXT PRIMARY KEY NOT NULL, record BLOB NOT NULL, version INTEGER NOT NULL, gc_due_at INTEGER) WITHOUT ROWID`,
    `CREATE INDEX IF NOT EXISTS ${table}_gc_due ON ${table} (gc_due_at, id) WHERE gc_due_at IS NOT NULL`,
  ];
}

/**
 * The schema, for a migration file (`wrangler d1 migrations`) instead of lazy
 * creation: the table and its GC index, two statements.
 */
export function d1Schema(table = "idemkit_records") {
  checkTableName(table);
  return createStatements(table).map((s) => `${s};`).join("\n");
}

/**
 * The upgrade of a table created by an earlier `d1Schema` (without `gc_due_at`),
 * for a migration file: rows written before get due time 0, so the first GC pass
 * decodes them and indexes their real due time.
 */
export function d1Upgrade(table = "idemkit_records") {
  checkTableName(table);
  return [`ALTER TABLE ${table} ADD COLUMN gc_due_at INTEGER DEFAULT 0`, createStatements(table)[1]].map((s) => `${s};`).join("\n");
}

function toBytes(value) {
  if (value instanceof Uint8Array) return value;
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (Array.isArray(value)) return Uint8Array.from(value);
  throw new TypeError("D1 returned a record that is not a BLOB");
}

/** Creates the table and index, adding gc_due_at to a table from before GC. */
async function prepareTable(d1, table) {
  const [create, index] = createStatements(table);
  const [, info] = await d1.batch([d1.prepare(create), d1.prepare(`PRAGMA table_info(${table})`)]);
  const hasColumn = (rows) => rows.some((column) => column.name === "gc_due_at");
  if (!hasColumn(info.results)) {
    try {
      await d1.prepare(`ALTER TABLE ${table} ADD COLUMN gc_due_at INTEGER DEFAULT 0`).run();
    } catch (err) {
      // Another isolate added it first.
      if (!hasColumn((await d1.prepare(`PRAGMA table_info(${table})`).all()).results)) throw err;
    }
  }
  await d1.prepare(index).run();
}

/**
 * @param {D1Database} d1 the D1 binding (`env.DB`)
 * @param {{ table?: string, createTable?: boolean }} [options]
 * @returns {import("../index.d.ts").Adapter}
 */
export function d1Adapter(d1, options) {
  options ??= {};
  const table = options.table ?? "idemkit_records";
  checkTableName(table);
  if (typeof d1?.prepare !== "function") throw new TypeError("d1Adapter expects a D1 database binding");
  let ready = options.createTable === false ? Promise.resolve() : null;
  const ensure = () => (ready ??= prepareTable(d1, table).catch((err) => {
    ready = null;
    throw err;
  }));
  const compareAndSet = (id, record, version, meta) =>
    d1.prepare(`UPDATE ${table} SET record = ?, version = version + 1, gc_due_at = ? WHERE id = ? AND version = ?`).bind(record, dueOf(meta), id, version);
  return {
    name: "d1Adapter",
    maxRecordBytes: D1_MAX_ROW_BYTES - ROW_HEADROOM,
    async get(id) {
      await ensure();
      const row = await d1.prepare(`SELECT record, version FROM ${table} WHERE id = ?`).bind(id).first();
      return row === null ? null : { record: toBytes(row.record), version: Number(row.version) };
    },
    async insert(id, record, meta) {
      await ensure();
      const version = firstVersion();
      const result = await d1
        .prepare(`INSERT INTO ${table} (id, record, version, gc_due_at) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`)
        .bind(id, record, version, dueOf(meta))
        .run();
      return result.meta.changes === 1 ? { version } : null;
    },
    async update(id, record, version, meta) {
      await ensure();
      const result = await compareAndSet(id, record, version, meta).run();
      return result.meta.changes === 1 ? { version: version + 1 } : null;
    },
    async updateWith(id, record, version, meta, local) {
      requireLocal(Array.isArray(local), "d1Adapter", "an array of bound D1 prepared statements");
      await ensure();
      let results;
      try {
        results = await d1.batch([compareAndSet(id, record, version, meta), d1.prepare(CAS_GUARD), ...local]);
      } catch (err) {
        if (casRefused(err)) return null;
        // D1 names the failed statement only in its message: any other failure of
        // the batch is reported as the caller's, with D1's error as the cause.
        throw localWritesFailed(err);
      }
      return { version: version + 1, result: results.slice(2) };
    },
    async delete(id, version) {
      await ensure();
      const result = await d1.prepare(`DELETE FROM ${table} WHERE id = ? AND version = ?`).bind(id, version).run();
      return result.meta.changes === 1;
    },
    async scan(options) {
      const { gcDueBefore, limit, after } = scanLimit(options);
      await ensure();
      const { results } = await d1
        .prepare(
          `SELECT id, record, version, gc_due_at FROM ${table} WHERE gc_due_at <= ? AND (gc_due_at, id) > (?, ?) ORDER BY gc_due_at, id LIMIT ?`,
        )
        .bind(gcDueBefore, after?.gcDueAt ?? -1, after?.id ?? "", limit + 1)
        .all();
      return pageOf(results, limit, toBytes);
    },
  };
}
