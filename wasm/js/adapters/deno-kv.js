// Deno KV. Claims are atomic operations checked on the versionstamp: a check with
// `versionstamp: null` is insert-if-absent, a check with the versionstamp read is
// compare-and-set. A KV value is at most 64 KiB, so a record (which holds the stored
// response body) must fit in that: the adapter says so in `maxRecordBytes`, and
// createIdempotency keeps no body that would make a record larger (the response is
// answered once and a retry gets 410 response-expired).
//
// GC index: a record whose GC is due has a second key `[...prefix, "gc", due, id]`,
// set, moved and deleted in the same atomic operation as the record, so `scan`
// lists the due records in (due, id) order. Values written before this index are
// bare bytes without a GC key: they are read as before, and `scan` first walks the
// records (ids are hex, journal ids start with "action:", so all sort before
// "gc"), at most `limit` per call, rewriting each bare value as due at 0 so GC
// decodes it and indexes its real due time; the walk's progress is kept under
// `[...prefix, "gc-backfill"]`.
import { dueOf, scanLimit } from "./gc-index.js";

// Local (SQLite-backed) KV refuses a commit with "database is locked" while another
// connection to the same file writes. A refused commit changed nothing and its check
// is evaluated again on retry, so retrying it is safe; after the last attempt the
// error reaches idemkit, which answers 503 and executes nothing.
const LOCKED_RETRIES = 10; // about 1 s of backoff in all

// Deno KV's limit applies to the serialized value: 65 536 bytes, of which the V8
// serialization of `{ record, gcDueAt }` takes a few dozen for its tags, names and
// lengths.
const KV_MAX_VALUE_BYTES = 64 * 1024;
const SERIALIZATION_HEADROOM = 128;

async function commit(build) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await build().commit();
    } catch (err) {
      if (attempt >= LOCKED_RETRIES || !/database is locked/i.test(String(err?.message))) throw err;
      await new Promise((resolve) => setTimeout(resolve, 2 ** attempt + Math.random() * 5));
    }
  }
}

/** A stored value: `{ record, gcDueAt }`, or the bare bytes written before the GC index. */
function rowOf(value) {
  return value instanceof Uint8Array ? { record: value, gcDueAt: null } : { record: value.record, gcDueAt: value.gcDueAt ?? null };
}

/**
 * @param {Deno.Kv} kv
 * @param {{ prefix?: Deno.KvKey }} [options]
 * @returns {import("../index.d.ts").Adapter}
 */
export function denoKvAdapter(kv, options) {
  options ??= {};
  const prefix = options.prefix ?? ["idemkit"];
  if (typeof kv?.atomic !== "function") throw new TypeError("denoKvAdapter expects a Deno.Kv");
  // Record ids are hex strings, so no record key is `[...prefix, "gc"]`.
  const keyOf = (id) => [...prefix, id];
  const gcKey = (due, id) => [...prefix, "gc", due, id];
  /** The atomic operation that writes `record` at `key` after `check`, moving its GC key from `old`. */
  function writeOp(check, id, record, old, meta) {
    const key = keyOf(id);
    const due = dueOf(meta);
    const op = kv.atomic().check({ key, versionstamp: check }).set(key, { record, gcDueAt: due });
    if (old !== null && old !== due) op.delete(gcKey(old, id));
    if (due !== null && old !== due) op.set(gcKey(due, id), id);
    return op;
  }
  const backfillKey = [...prefix, "gc-backfill"];
  /** Indexes up to `limit` values written before the GC index as due at 0. */
  async function backfill(limit) {
    const state = (await kv.get(backfillKey)).value;
    if (state === "done") return;
    const listed = [];
    const start = state?.after ? [...state.after, new Uint8Array()] : prefix;
    for await (const entry of kv.list({ start, end: [...prefix, "gc"] }, { limit })) listed.push(entry);
    for (const entry of listed) {
      if (!(entry.value instanceof Uint8Array)) continue;
      const id = entry.key[prefix.length];
      // A value changed since the listing has its due time already: the check refuses.
      await commit(() =>
        kv.atomic().check({ key: entry.key, versionstamp: entry.versionstamp }).set(entry.key, { record: entry.value, gcDueAt: 0 }).set(gcKey(0, id), id),
      );
    }
    await kv.set(backfillKey, listed.length < limit ? "done" : { after: listed[listed.length - 1].key });
  }
  return {
    // No updateWith: completeWith refuses this adapter (local-unsupported).
    name: "denoKvAdapter",
    maxRecordBytes: KV_MAX_VALUE_BYTES - SERIALIZATION_HEADROOM,
    async get(id) {
      const entry = await kv.get(keyOf(id));
      return entry.versionstamp === null ? null : { record: rowOf(entry.value).record, version: entry.versionstamp };
    },
    async insert(id, record, meta) {
      const result = await commit(() => writeOp(null, id, record, null, meta));
      return result.ok ? { version: result.versionstamp } : null;
    },
    async update(id, record, version, meta) {
      // The GC key to move is the one of the value at `version`: read it, and the
      // check on `version` makes the write fail if the value changed since.
      const entry = await kv.get(keyOf(id));
      if (entry.versionstamp !== version) return null;
      const result = await commit(() => writeOp(version, id, record, rowOf(entry.value).gcDueAt, meta));
      return result.ok ? { version: result.versionstamp } : null;
    },
    async delete(id, version) {
      const key = keyOf(id);
      const entry = await kv.get(key);
      if (entry.versionstamp !== version) return false;
      const old = rowOf(entry.value).gcDueAt;
      const result = await commit(() => {
        const op = kv.atomic().check({ key, versionstamp: version }).delete(key);
        return old === null ? op : op.delete(gcKey(old, id));
      });
      return result.ok;
    },
    async scan(options) {
      const { gcDueBefore, limit, after } = scanLimit(options);
      if (after === null) await backfill(limit);
      // Any key that extends `after` sorts after it and before the next one.
      const start = after === null ? [...prefix, "gc"] : [...after, new Uint8Array()];
      const listed = [];
      for await (const entry of kv.list({ start, end: [...prefix, "gc", gcDueBefore + 1] }, { limit: limit + 1 })) listed.push(entry);
      const page = listed.slice(0, limit);
      const entries = [];
      // kv.getMany reads at most 10 keys.
      for (let i = 0; i < page.length; i += 10) {
        const chunk = page.slice(i, i + 10);
        const rows = await kv.getMany(chunk.map((entry) => keyOf(entry.value)));
        for (const [j, row] of rows.entries()) {
          if (row.versionstamp === null) continue;
          entries.push({ id: chunk[j].value, record: rowOf(row.value).record, version: row.versionstamp, gcDueAt: chunk[j].key[prefix.length + 1] });
        }
      }
      return { entries, next: listed.length > limit ? page[page.length - 1].key : null };
    },
  };
}
