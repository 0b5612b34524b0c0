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
