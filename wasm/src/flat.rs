//! The flat form in which a record's view and the engine's two hot decisions
//! (a claim, a completion) cross to JavaScript: three parts instead of an
//! object built a property at a time (each property set is a crossing of its
//! own) or JSON text (a number formatter here, a parser there).
//!
//! - `numbers`, a `Float64Array`: every number in field order, and for each
//!   string its length in UTF-16 units (`-1`: none). An absent time is NaN.
//!   Milliseconds past 2^53 (only "never" gets there) are the nearest double,
//!   as JavaScript holds any number;
//! - `text`, one string: the strings back to back, cut out by JavaScript by
//!   the lengths in `numbers` (a 64-bit token among them as decimal text: it
//!   does not fit a double);
//! - `bytes`: response bodies and header values back to back, each given in
//!   `numbers` as its `start, end`.
//!
//! JavaScript reads the parts with `FlatReader` (`wasm/js/flat.js`) in the
//! order they were written; each writer here says its order.

use idemkit_core::UnixMillis;
use idemkit_core::record::{Step, StepState, StoredResponse};

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

    /// The three parts as JavaScript takes them: `[text, numbers, bytes]`.
    #[must_use]
    pub fn into_js(self) -> js_sys::Array {
        let [text, numbers, bytes] = self.into_parts();
        js_sys::Array::of3(&text, &numbers, &bytes)
    }

    /// The three parts, to be sent with a fourth (see [`into_js`](Self::into_js)).
    #[must_use]
    pub fn into_parts(self) -> [wasm_bindgen::JsValue; 3] {
        [
            wasm_bindgen::JsValue::from_str(&self.text),
            js_sys::Float64Array::from(self.numbers.as_slice()).into(),
            js_sys::Uint8Array::from(self.bytes.as_slice()).into(),
        ]
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

    /// A fencing token: 64 bits, which a double cannot hold, so decimal text
    /// (JavaScript makes it a `bigint`).
    pub fn token(&mut self, token: u64) {
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
