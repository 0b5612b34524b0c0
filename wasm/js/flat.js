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
// the numbers (f64 each), then the text (UTF-8), the bytes and the write. It is a
// buffer of its own (wasm-bindgen copies a returned Vec<u8> into a new one), so
// the f64s are 8-aligned; every JavaScript engine is little-endian.

const HEAD = 4;
const utf8 = new TextDecoder();

export class FlatReader {
  /** @param {Uint8Array} packed */
  constructor(packed) {
    // One view over the head and the numbers (and whatever 8-byte words follow,
    // never read): each typed array made costs as much as reading all of them.
    const numbers = new Float64Array(packed.buffer, packed.byteOffset, packed.length >> 3);
    const textStart = 8 * (HEAD + numbers[0]);
    const bytesStart = textStart + numbers[1];
    const writeStart = bytesStart + numbers[2];
    const writeLength = numbers[3];
    this.numbers = numbers;
    this.text = textStart === bytesStart ? "" : utf8.decode(packed.subarray(textStart, bytesStart));
    this.packed = packed;
    this.bytesStart = bytesStart;
    /** The record bytes to write (a copy: an adapter may keep it), "delete", or null. */
    this.write = writeLength >= 0 ? packed.slice(writeStart, writeStart + writeLength) : writeLength === -2 ? "delete" : null;
    this.next = HEAD;
    this.at = 0;
  }

  number() {
    return this.numbers[this.next++];
  }

  /** A time, or null. */
  time() {
    const t = this.numbers[this.next++];
    return Number.isNaN(t) ? null : t;
  }

  /** A 1 or 0 flag. */
  flag() {
    return this.numbers[this.next++] === 1;
  }

  string() {
    const end = this.at + this.numbers[this.next++];
    const s = this.text.slice(this.at, end);
    this.at = end;
    return s;
  }

  /** A string, or null. */
  optionalString() {
    if (this.numbers[this.next] < 0) {
      this.next++;
      return null;
    }
    return this.string();
  }

  /** A fencing token (decimal text: 64 bits do not fit a number). */
  token() {
    return BigInt(this.string());
  }

  /** A byte field: a copy, so it outlives nothing else. */
  range() {
    const start = this.bytesStart + this.numbers[this.next++];
    return this.packed.slice(start, this.bytesStart + this.numbers[this.next++]);
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
