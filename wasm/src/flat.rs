//! The flat form in which a record's view and the engine's two hot decisions
//! (a claim, a completion) cross to JavaScript: one byte array instead of an
//! object built a property at a time (each property set is a crossing of its
//! own), JSON text (a number formatter here, a parser there), or an array of
//! typed arrays (each a crossing and an allocation on the JavaScript side).
//!
//! A value has three parts:
//!
//! - `numbers`: every number in field order, and for each string its length
//!   in UTF-16 units (`-1`: none). An absent time is NaN. Milliseconds past
//!   2^53 (only "never" gets there) are the nearest double, as JavaScript
//!   holds any number;
//! - `text`: the strings back to back, cut out by JavaScript by the lengths
//!   in `numbers` (a 64-bit token past 2^53 among them as decimal text: it
//!   does not fit a double);
//! - `bytes`: response bodies and header values back to back, each given in
//!   `numbers` as its `start, end`.
//!
//! [`Flat::pack_into`] lays them out in one array, with the record bytes a
//! decision writes (see [`Written`]) after them:
//!
//! | at | what |
//! |---|---|
//! | 0 | four `f64`: the count of numbers, the text's length in bytes, the bytes' length, the write's length (`-1`: write nothing, `-2`: delete) |
//! | 32 | the numbers, `f64` each |
//! | then | the text, UTF-8 |
//! | then | the bytes |
//! | then | the write's bytes |
//!
//! The array is not handed over: [`Flat::into_shared`] lays it out in one
//! buffer of linear memory, reused by every call, and returns its address,
//! which starts 8-aligned. Every `f64` is little-endian, as WebAssembly's memory
//! and every JavaScript engine it runs in are, so JavaScript reads the head and
//! the numbers through the one `Float64Array` over the memory it keeps. Each
//! array JavaScript makes of more than 64 bytes costs a backing store of its
//! own (about a microsecond with its collection), so only what must outlive
//! the read is copied out.
//!
//! JavaScript reads a value with `FlatReader` (`wasm/js/flat.js`) in the
//! order it was written, before its next call into WebAssembly; each writer
//! here says its order.

use core::cell::RefCell;

use idemkit_core::UnixMillis;
use idemkit_core::record::{Step, StepState, StoredResponse};

/// The head's words: the counts of numbers, text bytes and bytes, and the
/// write's length.
const HEAD_WORDS: usize = 4;

/// 2^53: every integer up to it is exact in a double.
const EXACT_IN_DOUBLE: u64 = 1 << 53;

/// The capacity the shared buffer keeps between values; a larger one is
/// released after use.
const SHARED_KEPT_BYTES: usize = 64 * 1024;

thread_local! {
    /// Where [`Flat::into_shared`] puts the last value (WebAssembly runs one
    /// thread: one buffer, reused by every call).
    static SHARED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// What a decision writes (core's `machine::Write`, its record encoded),
/// sent after its flat value (see [`Flat::pack_into`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written<'a> {
    /// Nothing: the answer came from the record as read.
    Keep,
    /// Delete the record.
    Delete,
    /// Put these encoded record bytes.
    Put(&'a [u8]),
}

/// A value being written flat (see the module's documentation).
#[derive(Debug, Default, PartialEq)]
pub struct Flat {
    /// The strings back to back.
    pub text: String,
    /// The numbers and string lengths, in field order.
    pub numbers: Vec<f64>,
    /// The bytes the ranges in `numbers` point into.
    pub bytes: Vec<u8>,
}

impl Flat {
    /// An empty value, with room for a record's usual fields.
    #[must_use]
    pub fn new() -> Self {
        Flat {
            text: String::with_capacity(96),
            numbers: Vec::with_capacity(24),
            bytes: Vec::new(),
        }
    }

    /// Appends the value and `write` to `out`, as the module's documentation
    /// lays them out (the head at `out`'s end). The caller sizes `out`
    /// ([`into_shared`](Self::into_shared) reserves
    /// the packed length once).
    #[allow(
        clippy::cast_precision_loss,
        reason = "lengths of one decision's parts: far below 2^53"
    )]
    pub fn pack_into(&self, write: Written<'_>, out: &mut Vec<u8>) {
        let (write_len, write_bytes): (f64, &[u8]) = match write {
            Written::Keep => (-1.0, &[]),
            Written::Delete => (-2.0, &[]),
            Written::Put(bytes) => (bytes.len() as f64, bytes),
        };
        let head = [
            self.numbers.len() as f64,
            self.text.len() as f64,
            self.bytes.len() as f64,
            write_len,
        ];
        for n in head.iter().chain(&self.numbers) {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(self.text.as_bytes());
        out.extend_from_slice(&self.bytes);
        out.extend_from_slice(write_bytes);
    }

    /// How many bytes [`pack_into`](Self::pack_into) appends.
    fn packed_len(&self, write: Written<'_>) -> usize {
        let written = match write {
            Written::Put(bytes) => bytes.len(),
            Written::Keep | Written::Delete => 0,
        };
        8 * (HEAD_WORDS + self.numbers.len()) + self.text.len() + self.bytes.len() + written
    }

    /// Packs the value and `write` into this thread's shared buffer (replacing
    /// what the last call left there) and returns its address in linear memory,
    /// 8-aligned. JavaScript reads it in place, through views of the memory it
    /// keeps, before it calls into WebAssembly again: no array is made for it,
    /// and only what must outlive the read (the write, a body) is copied out.
    #[must_use]
    pub fn into_shared(self, write: Written<'_>) -> usize {
        SHARED.with_borrow_mut(|buf| {
            buf.clear();
            let needed = self.packed_len(write) + 7;
            // One large value (a big body's view) does not keep its memory.
            if buf.capacity() > needed.max(SHARED_KEPT_BYTES) {
                *buf = Vec::new();
            }
            // No reallocation below this reservation: the address stays put.
            buf.reserve(needed);
            let pad = (8 - buf.as_ptr() as usize % 8) % 8;
            buf.resize(pad, 0);
            self.pack_into(write, buf);
            buf.as_ptr() as usize + pad
        })
    }

    /// A number.
    pub fn number(&mut self, n: f64) {
        self.numbers.push(n);
    }

    /// A count or a byte offset.
    #[allow(
        clippy::cast_precision_loss,
        reason = "counts and byte offsets of one record: far below 2^53"
    )]
    pub fn count(&mut self, n: usize) {
        self.number(n as f64);
    }

    /// A flag, as 1 or 0.
    pub fn flag(&mut self, on: bool) {
        self.number(if on { 1.0 } else { 0.0 });
    }

    /// Milliseconds since the epoch.
    #[allow(
        clippy::cast_precision_loss,
        reason = "past 2^53 the nearest double, which is what JavaScript holds"
    )]
    pub fn millis(&mut self, t: UnixMillis) {
        self.number(t.as_millis() as f64);
    }

    /// Milliseconds since the epoch, or none (NaN).
    pub fn optional_millis(&mut self, t: Option<UnixMillis>) {
        match t {
            Some(t) => self.millis(t),
            None => self.number(f64::NAN),
        }
    }

    /// A string.
    pub fn string(&mut self, s: &str) {
        let start = self.text.len();
        self.text.push_str(s);
        self.length_since(start);
    }

    /// A string, or none (length `-1`).
    pub fn optional_string(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.string(s),
            None => self.number(-1.0),
        }
    }

    /// A string written by `write` straight into the text (hex digits, a
    /// decimal token), without a buffer of its own.
    pub fn string_with(&mut self, write: impl FnOnce(&mut String)) {
        let start = self.text.len();
        write(&mut self.text);
        self.length_since(start);
    }

    /// A fencing token (JavaScript makes it a `bigint`): the number itself up
    /// to 2^53, which a double holds exactly; past it `-1`, then the decimal
    /// text. Tokens count attempts above the store's token floor, so they are
    /// numbers unless the floor was set near 2^64: a formatter here and a parse
    /// there saved.
    #[allow(
        clippy::cast_precision_loss,
        reason = "only tokens up to 2^53, exact in a double"
    )]
    pub fn token(&mut self, token: u64) {
        if token <= EXACT_IN_DOUBLE {
            self.number(token as f64);
            return;
        }
        self.number(-1.0);
        self.string_with(|text| {
            // Writing to a String cannot fail.
            let _ = core::fmt::Write::write_fmt(text, format_args!("{token}"));
        });
    }

    /// The length, in UTF-16 units (JavaScript's string indices), of the text
    /// written since byte `start`.
    fn length_since(&mut self, start: usize) {
        let written = self.text.get(start..).unwrap_or_default();
        let units = if written.is_ascii() {
            written.len()
        } else {
            written.encode_utf16().count()
        };
        self.count(units);
    }

    /// `start, end` of `bytes`, appended to the byte buffer.
    pub fn range(&mut self, bytes: &[u8]) {
        self.count(self.bytes.len());
        self.bytes.extend_from_slice(bytes);
        self.count(self.bytes.len());
    }

    /// Steps: their count, then each one's `name, state, providerKey,
    /// providerRef, startedAt, doneAt`.
    pub fn steps(&mut self, steps: &[Step]) {
        self.count(steps.len());
        for step in steps {
            self.string(&step.name);
            self.string(match step.state {
                StepState::Started => "started",
                StepState::Done => "done",
            });
            self.string(&step.provider_key);
            self.optional_string(step.provider_ref.as_deref());
            self.millis(step.started_at);
            self.optional_millis(step.done_at);
        }
    }

    /// A stored response: `status`, the header count and each header's name
    /// and value (a range), whether there is a body (1 or 0) and its range,
    /// `resourceRef`.
    pub fn response(&mut self, response: &StoredResponse) {
        self.number(f64::from(response.status));
        self.count(response.headers.len());
        for (name, value) in &response.headers {
            self.string(name);
            self.range(value);
        }
        self.flag(response.body.is_some());
        if let Some(body) = &response.body {
            self.range(body);
        }
        self.optional_string(response.resource_ref.as_deref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f64_at(packed: &[u8], word: usize) -> f64 {
        let bytes: [u8; 8] = packed[8 * word..8 * word + 8].try_into().unwrap();
        f64::from_le_bytes(bytes)
    }

    #[test]
    fn packed_lays_out_head_numbers_text_bytes_and_write() {
        let mut flat = Flat::new();
        flat.string("é1");
        flat.number(7.5);
        flat.range(b"body");
        let mut packed = Vec::new();
        flat.pack_into(Written::Put(b"record"), &mut packed);
        // The head: 4 numbers (the string's length, 7.5, the range's two ends),
        // 3 bytes of text, 4 bytes, a 6-byte write.
        assert_eq!(
            [0, 1, 2, 3].map(|w| f64_at(&packed, w)),
            [4.0, 3.0, 4.0, 6.0]
        );
        // "é1" is 2 UTF-16 units long, though 3 bytes of UTF-8.
        assert_eq!(
            [4, 5, 6, 7].map(|w| f64_at(&packed, w)),
            [2.0, 7.5, 0.0, 4.0]
        );
        assert_eq!(&packed[64..], "é1bodyrecord".as_bytes());
    }

    #[test]
    fn tokens_up_to_2_53_are_numbers_and_past_it_decimal_text() {
        let mut flat = Flat::new();
        for token in [1, 1 << 53, (1 << 53) + 1, u64::MAX] {
            flat.token(token);
        }
        assert_eq!(
            flat.numbers,
            [1.0, 9_007_199_254_740_992.0, -1.0, 16.0, -1.0, 20.0]
        );
        assert_eq!(flat.text, "900719925474099318446744073709551615");
    }

    #[test]
    fn packed_marks_a_delete_and_no_write_by_length() {
        let (mut delete, mut nothing) = (Vec::new(), Vec::new());
        Flat::new().pack_into(Written::Delete, &mut delete);
        Flat::new().pack_into(Written::Keep, &mut nothing);
        assert_eq!(f64_at(&delete, 3), -2.0);
        assert_eq!(f64_at(&nothing, 3), -1.0);
        assert_eq!(delete.len(), 32);
        assert_eq!(nothing.len(), 32);
    }

    #[test]
    fn shared_values_start_8_aligned_and_reuse_one_buffer() {
        let mut first = Flat::new();
        first.string("odd");
        let a = first.into_shared(Written::Put(b"abc"));
        assert_eq!(a % 8, 0);
        SHARED.with_borrow(|buf| {
            let at = a - buf.as_ptr() as usize;
            let mut expected = Vec::new();
            let mut again = Flat::new();
            again.string("odd");
            again.pack_into(Written::Put(b"abc"), &mut expected);
            assert_eq!(&buf[at..], &expected[..]);
        });
        // A value too large to keep is released after the next one.
        let mut large = Flat::new();
        let body = vec![7u8; 2 * SHARED_KEPT_BYTES];
        large.range(&body);
        let b = large.into_shared(Written::Keep);
        assert_eq!(b % 8, 0);
        let c = Flat::new().into_shared(Written::Delete);
        assert_eq!(c % 8, 0);
        SHARED.with_borrow(|buf| assert!(buf.capacity() <= SHARED_KEPT_BYTES));
    }
}
