// What every adapter shares about its GC index: the `meta` argument of insert and
// update, and the arguments of scan.

/**
 * The GC due time a write indexes: `meta.gcDueAt` (milliseconds), or null when the
 * record is never due (Running, Unknown) or the caller passed no meta (the
 * journal's entries, which are not records).
 * @param {{ gcDueAt?: number | null } | undefined} meta
 * @returns {number | null}
 */
export function dueOf(meta) {
  const due = meta?.gcDueAt ?? null;
  if (due !== null && (!Number.isSafeInteger(due) || due < 0)) {
    throw new TypeError(`meta.gcDueAt must be null or non-negative integer milliseconds, not ${due}`);
  }
  return due;
}

let lastFirstVersion = 0;

/**
 * The version an insert gives a new record. Versions never repeat for a key,
 * even after GC deleted its record (docs/architecture.md, "Retention"): a compare-and-set
 * or a GC delete still holding a deleted record's version must never match the
 * record that replaced it (two GC passes overlapping around a new claim would
 * otherwise delete the new, live record). A deleted record's versions began at
 * its own insert, at least a record window earlier, and grew by one per write;
 * a new one begins at the time in milliseconds × 1024 (below 2^53 until the
 * year 2248), above them as long as clocks agree to within the record window
 * and a record sees fewer writes than 1024 per millisecond it lives.
 * @returns {number}
 */
export function firstVersion() {
  // 1024 apart within a process too, so an id deleted and inserted again in
  // the same millisecond (tests do) still begins above its old versions.
  lastFirstVersion = Math.max(Date.now() * 1024, lastFirstVersion + 1024);
  return lastFirstVersion;
}

/**
 * `scan`'s options, checked: `gcDueBefore` (inclusive, milliseconds), `limit` (a
 * positive integer) and `after` (the `next` of the previous page, or undefined).
 */
export function scanLimit(options) {
  const { gcDueBefore, limit, after } = options ?? {};
  if (!Number.isSafeInteger(gcDueBefore) || gcDueBefore < 0) {
    throw new TypeError("scan: gcDueBefore must be non-negative integer milliseconds");
  }
  if (!Number.isSafeInteger(limit) || limit <= 0) throw new TypeError("scan: limit must be a positive integer");
  return { gcDueBefore, limit, after: after ?? null };
}

/**
 * SQL rows `(id, record, version, gc_due_at)` in (gc_due_at, id) order, one more
 * than `limit` when another page follows → a scan page: the entries and the cursor
 * after the last one (null when none follows).
 */
export function pageOf(rows, limit, toBytes) {
  const entries = rows.slice(0, limit).map((row) => ({
    id: row.id,
    record: toBytes(row.record),
    version: Number(row.version),
    gcDueAt: Number(row.gc_due_at),
  }));
  const last = entries[entries.length - 1];
  return { entries, next: rows.length > limit ? { gcDueAt: last.gcDueAt, id: last.id } : null };
}
