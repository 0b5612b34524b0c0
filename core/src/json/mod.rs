//! Strict canonical JSON: RFC 8785 (JCS) output, I-JSON input.
//!
//! [`canonicalize`] turns any accepted JSON text into its RFC 8785 bytes: members
//! sorted by UTF-16 code units (§3.2.3), strings with minimal escaping
//! (§3.2.2.2), numbers in ECMAScript form (§3.2.2.3), no whitespace. Anything
//! that is not JSON (RFC 8259) is rejected with a [`JsonError`] that names the
//! kind, the byte offset and the JSON Pointer of the value.
//!
//! ## Profiles
//!
//! | | [`Profile::Strict`] (default) | [`Profile::Rfc8785`] |
//! |---|---|---|
//! | not JSON (bad UTF-8, raw controls, NaN, trailing data, …) | rejected | rejected |
//! | lone or reversed surrogate escapes | rejected | rejected (cannot be written as UTF-8) |
//! | duplicate member names (after unescaping) | rejected | rejected (RFC 8785 requires I-JSON input) |
//! | leading BOM | rejected | rejected (RFC 8259 §8.1: must not be added; our choice) |
//! | nesting deeper than `max_depth` (128) | rejected | rejected (same limit; our choice) |
//! | number whose exact value differs from its serialization (`9007199254740993`, `1e-400`) | rejected | rounded |
//!
//! With the strict profile two accepted inputs give the same bytes **if and only
//! if** they are the same JSON value: `1.0`, `1e0` and `10e-1` are one number,
//! `\u0061` and `a` one string, and no number is silently rounded into another.
//!
//! The resource limits (`max_depth`, `max_input_len`, `max_number_len`) apply to
//! both profiles; raise them in [`CanonicalizeOptions`] if needed.
//!
//! ## Example
//!
//! ```
//! use idemkit_core::json::{canonicalize, JsonErrorKind};
//!
//! let out = canonicalize(br#"{ "b": [1.0, 1e0, "\u0061"], "a": null }"#)?;
//! assert_eq!(out, br#"{"a":null,"b":[1,1,"a"]}"#);
//!
//! let err = canonicalize(br#"{"x":[{"a":1,"a":2}]}"#).unwrap_err();
//! assert_eq!(err.code(), "json-duplicate-member-name");
//! assert_eq!(err.pointer, "/x/0/a");
//! assert_eq!(err.to_string(), r#"duplicate member name "a" at byte 13 (pointer /x/0/a)"#);
//! # Ok::<(), idemkit_core::json::JsonError>(())
//! ```
//!
//! ## Streaming
//!
//! [`canonicalize_to`] writes into any [`Sink`] (a `Vec<u8>`, a
//! [`blake3::Hasher`]) without building the output. The input is fully parsed and
//! validated first, so a sink never sees a byte of a rejected input.
//!
//! ## Memory
//!
//! Canonicalization takes two passes over the input and builds no tree. The
//! first validates and records, for each object whose members are not already
//! in canonical order, the sorted offsets of its member names (4 bytes a
//! member below 4 GiB of input); the second reads the input again and writes
//! each value straight into the output, jumping between an object's members in
//! sorted order. Besides the input and the output, the working memory is that
//! record plus a few bytes per open container: [`canonicalize_to`] into a
//! hasher or a file needs about the input once more at most, and far less for
//! typical documents.
//!
//! [`canonicalize`] and [`canonicalize_with`] build the output in memory
//! anyway, so an input of up to 64 KiB (a request body) is read only once:
//! each value is written as it is read, and an object whose members are out of
//! order is rewritten from a copy of them when it closes. That reading takes
//! about 40% fewer instructions than the two passes; on any input it does not
//! accept, and on a deep nest of reordered objects (whose copies would add up),
//! the two passes run instead, so the accepted inputs, the bytes and the
//! errors are the same either way. Fingerprints of whole bodies are computed
//! the same way.

use crate::prelude::*;

mod emit;
mod error;
mod number;
mod one_pass;
mod plan;
mod pointer;
mod strings;

pub use error::{JsonError, JsonErrorKind};
pub use pointer::{JsonPointer, PointerError};

pub(crate) use emit::emit_into;
pub(crate) use one_pass::canonicalize_small;
pub(crate) use plan::plan;
pub(crate) use pointer::{Target, resolve};

/// Which canonicalization rules apply (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Profile {
    /// RFC 8785 output, and every number must survive exactly (the default).
    #[default]
    Strict,
    /// Plain RFC 8785: numbers are rounded to the nearest double.
    Rfc8785,
}

/// Options for [`canonicalize_with`] and [`canonicalize_to`].
///
/// ```
/// use idemkit_core::json::{CanonicalizeOptions, Profile};
/// let opts = CanonicalizeOptions::default()
///     .profile(Profile::Rfc8785)
///     .max_depth(32);
/// assert_eq!(opts.max_depth, 32);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CanonicalizeOptions {
    /// The rules (default [`Profile::Strict`]).
    pub profile: Profile,
    /// Deepest nesting of arrays and objects accepted (default 128).
    pub max_depth: usize,
    /// Longest input accepted, in bytes (default 8 MiB).
    pub max_input_len: usize,
    /// Longest number literal accepted, in bytes (default 100).
    pub max_number_len: usize,
}

impl CanonicalizeOptions {
    /// Default nesting limit.
    pub const DEFAULT_MAX_DEPTH: usize = 128;
    /// Default input size limit (8 MiB).
    pub const DEFAULT_MAX_INPUT_LEN: usize = 8 << 20;
    /// Default number literal limit.
    pub const DEFAULT_MAX_NUMBER_LEN: usize = 100;

    /// Sets the profile.
    #[must_use]
    pub fn profile(mut self, profile: Profile) -> Self {
        self.profile = profile;
        self
    }

    /// Sets the nesting limit.
    #[must_use]
    pub fn max_depth(mut self, max: usize) -> Self {
        self.max_depth = max;
        self
    }

    /// Sets the input size limit.
    #[must_use]
    pub fn max_input_len(mut self, max: usize) -> Self {
        self.max_input_len = max;
        self
    }

    /// Sets the number literal limit.
    #[must_use]
    pub fn max_number_len(mut self, max: usize) -> Self {
        self.max_number_len = max;
        self
    }
}

impl Default for CanonicalizeOptions {
    fn default() -> Self {
        CanonicalizeOptions {
            profile: Profile::Strict,
            max_depth: Self::DEFAULT_MAX_DEPTH,
            max_input_len: Self::DEFAULT_MAX_INPUT_LEN,
            max_number_len: Self::DEFAULT_MAX_NUMBER_LEN,
        }
    }
}

/// Where canonical bytes go. Writes cannot fail.
pub trait Sink {
    /// Appends `bytes`.
    fn write(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn write(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Sink for blake3::Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

impl<S: Sink + ?Sized> Sink for &mut S {
    fn write(&mut self, bytes: &[u8]) {
        (**self).write(bytes);
    }
}

/// Counts bytes instead of keeping them (used to length-frame a streamed body).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CountingSink(pub u64);

impl Sink for CountingSink {
    fn write(&mut self, bytes: &[u8]) {
        self.0 = self.0.saturating_add(bytes.len() as u64);
    }
}

/// Canonicalizes with the strict profile and default limits.
///
/// # Errors
///
/// A [`JsonError`] for any input that is not accepted (see the module docs).
pub fn canonicalize(input: &[u8]) -> Result<Vec<u8>, JsonError> {
    canonicalize_with(input, &CanonicalizeOptions::default())
}

/// Canonicalizes with the given options.
///
/// # Errors
///
/// A [`JsonError`] for any input that is not accepted.
pub fn canonicalize_with(input: &[u8], opts: &CanonicalizeOptions) -> Result<Vec<u8>, JsonError> {
    // Canonical text is rarely longer than its input (only numbers such as
    // `1e20` grow), so this is usually the only allocation of the output.
    let mut out = Vec::with_capacity(input.len());
    // A small input is read once; anything that pass does not take (an error
    // to report, a large input) goes through the two passes.
    if canonicalize_small(input, opts, &mut out) {
        return Ok(out);
    }
    let plan = plan(input, opts)?;
    emit_into(&plan, plan.root, &[], &mut out);
    Ok(out)
}

/// Canonicalizes into `sink` without building the output.
///
/// The whole input is validated before the first byte is written: on error the
/// sink is untouched.
///
/// ```
/// use idemkit_core::json::{canonicalize_to, CanonicalizeOptions};
/// let mut hasher = blake3::Hasher::new();
/// canonicalize_to(b"[1.0, 2]", &CanonicalizeOptions::default(), &mut hasher)?;
/// assert_eq!(hasher.finalize(), blake3::hash(b"[1,2]"));
/// # Ok::<(), idemkit_core::json::JsonError>(())
/// ```
///
/// # Errors
///
/// A [`JsonError`] for any input that is not accepted.
pub fn canonicalize_to<S: Sink + ?Sized>(
    input: &[u8],
    opts: &CanonicalizeOptions,
    sink: &mut S,
) -> Result<(), JsonError> {
    let plan = plan(input, opts)?;
    emit::emit_to(&plan, plan.root, &[], sink);
    Ok(())
}

/// The RFC 8785 §3.2.2.3 (ECMAScript) form of a double, or `None` for NaN and
/// the infinities, which JSON cannot hold.
///
/// ```
/// use idemkit_core::json::format_number;
/// assert_eq!(format_number(1e21).as_deref(), Some("1e+21"));
/// assert_eq!(format_number(-0.0).as_deref(), Some("0"));
/// assert_eq!(format_number(f64::NAN), None);
/// ```
#[must_use]
pub fn format_number(value: f64) -> Option<String> {
    value
        .is_finite()
        .then(|| number::format(value, &mut ryu_js::Buffer::new()).to_owned())
}

/// Writes `s` as an RFC 8785 string literal (with quotes) into `sink`.
pub fn write_string<S: Sink + ?Sized>(s: &str, sink: &mut S) {
    let mut out = Vec::with_capacity(s.len() + 2);
    strings::escape_into(s, &mut out);
    sink.write(&out);
}
