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

let handedOver = null;
let lending = false;

/** Calls `write()` (one adapter write of `record`) with `record` marked as handed over. */
export function handingOver(record, write) {
  handedOver = record;
  try {
    return write();
  } finally {
    handedOver = null;
  }
}

/** Calls `read()` (one adapter read) for a reader that never changes the bytes it gets. */
export function readingOnly(read) {
  lending = true;
  try {
    return read();
  } finally {
    lending = false;
  }
}

/** `record` itself when the engine handed it over, else a copy the caller cannot change. */
export function keptCopy(record) {
  return record === handedOver && record !== null ? record : record.slice();
}

/** The stored `record` itself for a reader that only reads, else a copy. */
export function lentCopy(record) {
  return lending ? record : record.slice();
}
