// Reading what core writes flat (wasm/src/flat.rs): a record's view and a
// claim's decision cross from WebAssembly as `[text, numbers, bytes]` instead of
// an object built a property at a time (a crossing each) or JSON text to parse.
// `numbers` holds every number in field order, and for each string its length in
// UTF-16 units (-1: none) while `text` holds the strings back to back; an absent
// time is NaN; byte fields are `start, end` into `bytes`. A reader takes the
// fields in the order the writer put them.

export class FlatReader {
  /** @param {[string, Float64Array, Uint8Array]} parts */
  constructor([text, numbers, bytes]) {
    this.text = text;
    this.numbers = numbers;
    this.bytes = bytes;
    this.next = 0;
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
    const start = this.numbers[this.next++];
    return this.bytes.slice(start, this.numbers[this.next++]);
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
