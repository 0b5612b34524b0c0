// Reading what core writes flat (wasm/src/flat.rs): a record's view and the
// decisions of a claim and a completion cross from WebAssembly as one byte array
// instead of an object built a property at a time (a crossing each), JSON text to
// parse, or an array of typed arrays (a crossing and an allocation each).
// `numbers` holds every number in field order, and for each string its length in
// UTF-16 units (-1: none) while `text` holds the strings back to back; an absent
// time is NaN; byte fields are `start, end` into `bytes`; `write` is the record
// bytes the decision writes, "delete", or null. A reader takes the fields in the
// order the writer put them.
//
// The array: four little-endian f64 (the count of numbers, the text's and the
// bytes' lengths in bytes, the write's length, -1 for none and -2 for delete),
// the numbers (f64 each), then the text (UTF-8), the bytes and the write. It is
// not copied out of WebAssembly: a call returns its address in linear memory
// (8-aligned, in a buffer the next call reuses), and the reader reads it there,
// through views of the memory kept across calls. So a reader is read to its end
// before the next call into WebAssembly, and what must outlive it (the write, a
// byte field) is copied. Every JavaScript engine is little-endian.
//
// A small write may be copied into a block it shares with the writes before it,
// as Node's Buffer pool does: one backing store for dozens of records instead of
// one each, which an allocation and the garbage collector's tracking make the
// largest cost of a memory write. A block is only ever appended to, so a record in
// it never changes; it is freed when no record in it is held. Only for an adapter
// that keeps the bytes as they are (adapters/handover.js says which).

import { wasmMemory } from "./idemkit_wasm.js";

const HEAD = 4;
const utf8 = new TextDecoder();

let memory = null;
let words = new Float64Array(0);
let bytes = new Uint8Array(0);

/** Makes the views of linear memory again when there are none yet or it grew (growing detaches the old buffer). */
function viewMemory() {
  if (bytes.byteLength === 0) {
    memory ??= wasmMemory();
    words = new Float64Array(memory.buffer);
    bytes = new Uint8Array(memory.buffer);
  }
}

/** The size of a shared block: Node's Buffer pool's. */
export const sharedBlockBytes = 8192;
// Larger writes get bytes of their own, so a block holds at least eight records.
const mostSharedBytes = sharedBlockBytes / 8;
// Arrays of up to 64 bytes live in V8's heap, with no backing store to save.
const inHeapBytes = 64;

let block = new ArrayBuffer(0);
let blockUsed = 0;

/** A copy of `source` that nothing else changes: in the shared block when `shared` and small, else of its own. */
function writeCopy(source, shared) {
  const length = source.length;
  if (!shared || length <= inHeapBytes || length > mostSharedBytes) return source.slice();
  if (blockUsed + length > block.byteLength) {
    block = new ArrayBuffer(sharedBlockBytes);
    blockUsed = 0;
  }
  const copy = new Uint8Array(block, blockUsed, length);
  copy.set(source);
  blockUsed += length;
  return copy;
}

export class FlatReader {
  /**
   * @param {number} at the address a call returned
   * @param {boolean} [sharedWrite] the write may be copied into a shared block
   */
  constructor(at, sharedWrite = false) {
    viewMemory();
    const head = at / 8;
    const textStart = at + 8 * (HEAD + words[head]);
    const bytesStart = textStart + words[head + 1];
    const writeStart = bytesStart + words[head + 2];
    const writeLength = words[head + 3];
    this.words = words;
    this.bytes = bytes;
    this.text = textStart === bytesStart ? "" : utf8.decode(bytes.subarray(textStart, bytesStart));
    this.bytesStart = bytesStart;
    /** The record bytes to write (a copy: an adapter may keep it), "delete", or null. */
    this.write =
      writeLength >= 0 ? writeCopy(bytes.subarray(writeStart, writeStart + writeLength), sharedWrite) : writeLength === -2 ? "delete" : null;
    this.next = head + HEAD;
    this.at = 0;
  }

  number() {
    return this.words[this.next++];
  }

  /** A time, or null. */
  time() {
    const t = this.words[this.next++];
    return Number.isNaN(t) ? null : t;
  }

  /** A 1 or 0 flag. */
  flag() {
    return this.words[this.next++] === 1;
  }

  string() {
    const end = this.at + this.words[this.next++];
    const s = this.text.slice(this.at, end);
    this.at = end;
    return s;
  }

  /** A string, or null. */
  optionalString() {
    if (this.words[this.next] < 0) {
      this.next++;
      return null;
    }
    return this.string();
  }

  /** A fencing token: a number up to 2^53, else -1 and its decimal text (64 bits do not fit a number). */
  token() {
    const token = this.words[this.next++];
    return token >= 0 ? BigInt(token) : BigInt(this.string());
  }

  /** A byte field: a copy, so it outlives nothing else. */
  range() {
    const start = this.bytesStart + this.words[this.next++];
    return this.bytes.slice(start, this.bytesStart + this.words[this.next++]);
  }

  /** Steps, as `RecordView.steps` holds them. */
  steps() {
    const steps = [];
    for (let i = 0, count = this.number(); i < count; i++) {
      steps.push({
        name: this.string(),
        state: this.string(),
        providerKey: this.string(),
        providerRef: this.optionalString(),
        startedAt: this.number(),
        doneAt: this.time(),
      });
    }
    return steps;
  }

  /** A stored response, as `RecordView.response` holds it. */
  response() {
    const status = this.number();
    const headers = [];
    for (let i = 0, count = this.number(); i < count; i++) headers.push([this.string(), this.range()]);
    const body = this.flag() ? this.range() : null;
    return { status, headers, body, resourceRef: this.optionalString() };
  }
}
