// Record bytes that pass between the engine and an adapter without a copy. The
// memory adapter copies the bytes a caller gives it (the caller may change them
// after) and the bytes it hands out (the caller may change those), so no caller
// can change a stored record. The engine does neither: the write of a decision
// is fresh bytes it never changes afterwards (a copy out of WebAssembly, or a
// fresh encoding), and a row it reads it only reads. Between the two, a copy
// buys nothing and costs more than the rest of a memory read or write (each
// array over 64 bytes is a backing store of its own). Each mark lasts for one
// synchronous adapter call: it is set, the call made, and cleared, so no later
// caller's bytes are taken for the engine's.
//
// For an adapter that keeps those bytes as they are (memory, marked by
// `keepsSharedBlocks`), the engine copies a small write out of WebAssembly into a
// block it shares with the writes before it (flat.js). Any other adapter gets
// bytes of their own: one that serializes the array (V8 serialization, in a
// Durable Object or Deno KV) would store the whole block.

let handedOver = null;
let lending = false;

/** Calls `call()` with the marks set to `record` and `lend`, and clears them after. */
function marked(record, lend, call) {
  handedOver = record;
  lending = lend;
  try {
    return call();
  } finally {
    handedOver = null;
    lending = false;
  }
}

/** Calls `write()` (one adapter write of `record`) with `record` marked as handed over. */
export const handingOver = (record, write) => marked(record, false, write);

/** Calls `read()` (one adapter read) for a reader that never changes the bytes it gets. */
export const readingOnly = (read) => marked(null, true, read);

/** `record` itself when the engine handed it over, else a copy the caller cannot change. */
export function keptCopy(record) {
  return record === handedOver && record !== null ? record : record.slice();
}

/** The stored `record` itself for a reader that only reads, else a copy. */
export function lentCopy(record) {
  return lending ? record : record.slice();
}

/**
 * Set (true, not enumerable, so a spread copy does not inherit it) on an adapter
 * that keeps the record bytes the engine hands over to it as they are, and is
 * content with an array that is a view into a shared block.
 */
export const keepsSharedBlocks = Symbol.for("idemkit.adapter.keepsSharedBlocks");

/** Whether `record` is a view into a block it shares (or shared) with other records. */
export const inSharedBlock = (record) => record.byteLength !== record.buffer.byteLength;
