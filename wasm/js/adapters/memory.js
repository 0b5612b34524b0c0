// An in-process adapter: for tests, examples and single-process servers that may
// lose their records on restart. Each method runs to completion without awaiting,
// so insert-if-absent, compare-and-set and delete-if-version are atomic on
// JavaScript's single thread; it answers synchronously (no promise), so the
// engine takes no await hop on it. `scan` sorts the due records on each call (fine for
// the record counts a process keeps in memory). `updateWith` runs the caller's
// synchronous `local()` in the same step, only when the compare-and-set holds; the
// record is written only if `local` returned (a memory store has no transaction
// to roll back what `local` itself changed before it threw). Every committed write
// wakes the handlers waiting on that record (`changed`), so a retry held with
// `Prefer: wait` is answered as soon as the first attempt records, without polling.
// It keeps a copy of the bytes it is given, and hands out copies, so no caller can
// change a stored record; between it and the engine, which changes neither, the
// bytes pass as they are (handover.js), a small record in a block it shares with
// others. A few long-lived records could keep many blocks alive after the rest
// were deleted, so the first page of each GC scan gives the records of a block
// that is mostly unheld bytes of their own, and the block is freed.

import { dueOf, firstVersion, scanLimit } from "./gc-index.js";
import { inSharedBlock, keepsSharedBlocks, keptCopy, lentCopy } from "./handover.js";
import { requireLocal, runLocalSync } from "./local-writes.js";
import { answeringSynchronously } from "./synchronous.js";
import { writeWakers } from "./wakers.js";

/**
 * @returns {import("../index.d.ts").Adapter & { size(): number }}
 */
export function memoryAdapter() {
  /** @type {Map<string, { record: Uint8Array, version: number, gcDueAt: number | null }>} */
  const records = new Map();
  const wakers = writeWakers();
  /** Compare-and-set: writes `record` if the version is still `version` and `local` (if any) returned. */
  function compareAndSet(id, record, version, meta, local) {
    const row = records.get(id);
    if (row === undefined || row.version !== version) return null;
    const due = dueOf(meta);
    const result = local === undefined ? undefined : runLocalSync(local);
    records.set(id, { record: keptCopy(record), version: version + 1, gcDueAt: due });
    wakers.wake(id);
    return { version: version + 1, result };
  }
  /** Copies out the records held in a shared block of which less than a quarter is held. */
  function freeSparseBlocks() {
    const held = new Map();
    for (const row of records.values()) {
      if (inSharedBlock(row.record)) held.set(row.record.buffer, (held.get(row.record.buffer) ?? 0) + row.record.byteLength);
    }
    for (const row of records.values()) {
      const heldBytes = held.get(row.record.buffer);
      if (heldBytes !== undefined && heldBytes < row.record.buffer.byteLength / 4) row.record = row.record.slice();
    }
  }
  const adapter = {
    name: "memoryAdapter",
    ...answeringSynchronously({
      get(id) {
        const row = records.get(id);
        return row === undefined ? null : { record: lentCopy(row.record), version: row.version };
      },
      insert(id, record, meta) {
        if (records.has(id)) return null;
        const version = firstVersion();
        records.set(id, { record: keptCopy(record), version, gcDueAt: dueOf(meta) });
        wakers.wake(id);
        return { version };
      },
      update(id, record, version, meta) {
        const written = compareAndSet(id, record, version, meta);
        return written && { version: written.version };
      },
      updateWith(id, record, version, meta, local) {
        requireLocal(typeof local === "function", "memoryAdapter", "a synchronous function () => result");
        return compareAndSet(id, record, version, meta, local);
      },
      delete(id, version) {
        const row = records.get(id);
        if (row === undefined || row.version !== version) return false;
        records.delete(id);
        wakers.wake(id);
        return true;
      },
      scan(options) {
        const { gcDueBefore, limit, after } = scanLimit(options);
        if (!after) freeSparseBlocks();
        const due = [];
        for (const [id, row] of records) {
          if (row.gcDueAt === null || row.gcDueAt > gcDueBefore) continue;
          if (after && (row.gcDueAt < after.gcDueAt || (row.gcDueAt === after.gcDueAt && id <= after.id))) continue;
          due.push({ id, record: row.record.slice(), version: row.version, gcDueAt: row.gcDueAt });
        }
        due.sort((a, b) => a.gcDueAt - b.gcDueAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
        const entries = due.slice(0, limit);
        const last = entries[entries.length - 1];
        return { entries, next: due.length > limit ? { gcDueAt: last.gcDueAt, id: last.id } : null };
      },
    }),
    changed: wakers.changed,
    size() {
      return records.size;
    },
  };
  // Not enumerable: a wrapper made by spreading this adapter (`{ ...memory, get }`)
  // does not claim it keeps the bytes as they are; it says so itself, or gets bytes of its own.
  Object.defineProperty(adapter, keepsSharedBlocks, { value: true });
  return adapter;
}
