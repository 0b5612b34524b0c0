// A Durable Object's storage (`this.ctx.storage`). The check and the write of each
// claim run inside one `storage.transaction()`, so they are atomic even if another
// request to the same object interleaves at an await.
//
// GC index: a record whose GC is due at some time has a second key,
// `<prefix>gc:<due, 16 digits>:<id>`, written, moved and deleted in the same
// transaction as the record, so `scan` lists exactly the due records in (due, id)
// order. Record ids are lowercase hex (journal ids start with `action:`), so every
// row sorts before `<prefix>gc`, and no id starts with it. Rows written before the
// adapter kept this index have none: `scan` first walks the rows, at most `limit`
// per call, and indexes each such row as due at 0, so GC decodes it and indexes its
// real due time; the walk's progress is kept under `<prefix>gc-backfill`.
//
// A stored value is capped: 128 KiB with the key-value storage backend, 2 MB (key
// and value) with the SQLite backend. The adapter assumes the smaller cap unless
// told otherwise (`maxRecordBytes`), and createIdempotency keeps no response body
// that would make a record larger (answered once; a retry gets 410).
//
// Local writes (`updateWith`): the caller's `local(txn)` runs in the
// compare-and-set's `storage.transaction()`, after it succeeded, and writes through
// the same `txn`; when it throws, the transaction rolls back, the record included.
//
// Waiting (`Prefer: wait`): every request to a Durable Object runs in the one object,
// so a write of a record wakes the handlers waiting on it in the same object (the
// wakers belong to the storage, so adapters made per request share them): a retry
// held while its key runs is answered as soon as the first attempt records.
import { dueOf, firstVersion, scanLimit } from "./gc-index.js";
import { localWritesFailed, requireLocal } from "./local-writes.js";
import { writeWakers } from "./wakers.js";

/** The wakers of each object's storage (one per object, whichever adapter wrote). */
const wakersOf = new WeakMap();

const KV_BACKEND_MAX_VALUE_BYTES = 128 * 1024;
// The value is `{ record, version, gcDueAt }` in V8 serialization: tags, three
// member names, the Uint8Array's length and two numbers take a few dozen bytes.
const SERIALIZATION_HEADROOM = 256;
// storage.get(keys) takes at most 128 keys.
const GET_MANY = 128;

/** Milliseconds below 2^53 in 16 decimal digits, so keys sort as the numbers do. */
const padded = (due) => String(due).padStart(16, "0");

/**
 * @param {DurableObjectStorage} storage
 * @param {{ prefix?: string, maxRecordBytes?: number }} [options]
 * @returns {import("../index.d.ts").Adapter}
 */
export function durableObjectAdapter(storage, options) {
  options ??= {};
  const prefix = options.prefix ?? "idemkit:";
  if (typeof storage?.transaction !== "function") {
    throw new TypeError("durableObjectAdapter expects a Durable Object's ctx.storage");
  }
  const maxRecordBytes = options.maxRecordBytes ?? KV_BACKEND_MAX_VALUE_BYTES - SERIALIZATION_HEADROOM;
  if (!Number.isSafeInteger(maxRecordBytes) || maxRecordBytes <= 0) {
    throw new TypeError("durableObjectAdapter: maxRecordBytes must be a positive integer");
  }
  let wakers = wakersOf.get(storage);
  if (wakers === undefined) wakersOf.set(storage, (wakers = new Map()));
  // Per prefix: two adapters over one storage with different prefixes hold different records.
  if (!wakers.has(prefix)) wakers.set(prefix, writeWakers());
  const wake = wakers.get(prefix);
  /** `written` as it is, after waking the waiters of `id` if it says the write committed. */
  const woke = (id, written) => {
    if (written) wake.wake(id);
    return written;
  };
  const gcPrefix = `${prefix}gc:`;
  const backfillKey = `${prefix}gc-backfill`;
  /** Indexes up to `limit` rows written before the GC index as due at 0. */
  async function backfill(limit) {
    const state = await storage.get(backfillKey);
    if (state === "done") return;
    const listed = await storage.list({
      ...(state?.after ? { startAfter: state.after } : { start: prefix }),
      end: `${prefix}gc`,
      limit,
    });
    for (const [key, row] of listed) {
      if (row?.gcDueAt !== undefined) continue;
      const id = key.slice(prefix.length);
      await storage.transaction(async (txn) => {
        const current = await txn.get(key);
        if (current === undefined || current.gcDueAt !== undefined) return;
        await txn.put(key, { ...current, gcDueAt: 0 });
        await txn.put(gcKey(0, id), id);
      });
    }
    const keys = [...listed.keys()];
    await storage.put(backfillKey, keys.length < limit ? "done" : { after: keys[keys.length - 1] });
  }
  const gcKey = (due, id) => `${gcPrefix}${padded(due)}:${id}`;
  /** Writes the record row and moves its GC key, inside `txn`. */
  async function write(txn, id, record, version, before, meta) {
    const due = dueOf(meta);
    await txn.put(prefix + id, { record, version, gcDueAt: due });
    const old = before?.gcDueAt ?? null;
    if (old !== null && old !== due) await txn.delete(gcKey(old, id));
    if (due !== null && old !== due) await txn.put(gcKey(due, id), id);
  }
  /** Compare-and-set in one transaction, with the caller's `local(txn)` when given. */
  async function compareAndSet(id, record, version, meta, local) {
    return woke(id, await storage.transaction(async (txn) => {
      const row = await txn.get(prefix + id);
      if (row === undefined || row.version !== version) return null;
      await write(txn, id, record, version + 1, row, meta);
      if (local === undefined) return { version: version + 1 };
      try {
        return { version: version + 1, result: await local(txn) };
      } catch (err) {
        throw localWritesFailed(err);
      }
    }));
  }
  return {
    name: "durableObjectAdapter",
    maxRecordBytes,
    async get(id) {
      const row = await storage.get(prefix + id);
      return row === undefined ? null : { record: new Uint8Array(row.record), version: row.version };
    },
    async insert(id, record, meta) {
      return woke(id, await storage.transaction(async (txn) => {
        if ((await txn.get(prefix + id)) !== undefined) return null;
        const version = firstVersion();
        await write(txn, id, record, version, undefined, meta);
        return { version };
      }));
    },
    update: (id, record, version, meta) => compareAndSet(id, record, version, meta),
    async updateWith(id, record, version, meta, local) {
      requireLocal(typeof local === "function", "durableObjectAdapter", "a function (txn) => result (it may be async and write through txn)");
      return compareAndSet(id, record, version, meta, local);
    },
    async delete(id, version) {
      return woke(id, await storage.transaction(async (txn) => {
        const row = await txn.get(prefix + id);
        if (row === undefined || row.version !== version) return false;
        await txn.delete(prefix + id);
        if ((row.gcDueAt ?? null) !== null) await txn.delete(gcKey(row.gcDueAt, id));
        return true;
      }));
    },
    /** Resolves at the next committed write of `id` in this object, or when `signal` aborts. */
    changed: (id, signal) => wake.changed(id, signal),
    async scan(options) {
      const { gcDueBefore, limit, after } = scanLimit(options);
      if (after === null) await backfill(limit);
      const listed = await storage.list({
        ...(after === null ? { start: gcPrefix } : { startAfter: after }),
        end: `${gcPrefix}${padded(gcDueBefore + 1)}`,
        limit: limit + 1,
      });
      const keys = [...listed.keys()];
      const page = keys.slice(0, limit);
      const ids = page.map((key) => listed.get(key));
      const rows = new Map();
      for (let i = 0; i < ids.length; i += GET_MANY) {
        for (const [key, row] of await storage.get(ids.slice(i, i + GET_MANY).map((id) => prefix + id))) rows.set(key, row);
      }
      const entries = [];
      for (const [i, id] of ids.entries()) {
        const row = rows.get(prefix + id);
        // Written in one transaction with its GC key, so a listed key has its row;
        // a row that changed since the listing is GC's lost race, decided by version.
        if (row === undefined) continue;
        entries.push({ id, record: new Uint8Array(row.record), version: row.version, gcDueAt: Number(page[i].slice(gcPrefix.length, gcPrefix.length + 16)) });
      }
      return { entries, next: keys.length > limit ? page[page.length - 1] : null };
    },
  };
}
