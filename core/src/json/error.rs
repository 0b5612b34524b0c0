//! The one error type of canonicalization: what went wrong, at which byte, under
//! which JSON Pointer.

use crate::prelude::*;

use core::fmt;

/// Why an input was rejected. Every variant has a stable [`code`](Self::code),
/// reused by the JavaScript package.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JsonErrorKind {
    /// The input ended where more JSON was required (also: empty or
    /// whitespace-only input).
    UnexpectedEnd,
    /// No JSON value can start with this byte (`NaN`, `+1`, `.5`, `'a'`, a
    /// trailing comma before `]`).
    InvalidToken,
    /// A `:` was required after a member name.
    ExpectedColon,
    /// After an array element a `,` or `]` was required.
    ExpectedCommaOrBracket,
    /// After an object member a `,` or `}` was required.
    ExpectedCommaOrBrace,
    /// A member name (a string) was required.
    ExpectedMemberName,
    /// A complete value was followed by more than whitespace.
    TrailingData,
    /// A number literal breaks the RFC 8259 grammar (`5.`, `1e`, `-`).
    InvalidNumber,
    /// A number is too large in magnitude for an IEEE-754 double.
    NumberOverflow,
    /// Strict profile: the number's exact decimal value differs from the value
    /// of its RFC 8785 serialization (precision would be lost silently).
    NumberNotExact {
        /// What RFC 8785 would have emitted.
        canonical: String,
    },
    /// The number literal is longer than the configured limit.
    NumberTooLong {
        /// The limit in bytes.
        max: usize,
    },
    /// The input is not UTF-8 (incl. overlong forms and encoded surrogates).
    InvalidUtf8,
    /// A raw control character (U+0000..U+001F) inside a string.
    ControlCharacter,
    /// A backslash followed by anything but `" \ / b f n r t u`.
    InvalidEscape,
    /// A `\u` not followed by four hex digits.
    InvalidUnicodeEscape,
    /// A high surrogate escape (`\uD800`..`\uDBFF`) not followed by a low one.
    LoneHighSurrogate,
    /// A low surrogate escape (`\uDC00`..`\uDFFF`) without a high one before it.
    LoneLowSurrogate,
    /// An object has two members with the same name (compared after unescaping).
    DuplicateMemberName {
        /// The (unescaped) name.
        name: String,
    },
    /// The input starts with a byte order mark (U+FEFF).
    LeadingBom,
    /// Arrays and objects are nested deeper than the configured limit.
    TooDeep {
        /// The limit.
        max: usize,
    },
    /// The input is longer than the configured limit.
    InputTooLarge {
        /// The limit in bytes.
        max: usize,
    },
}

impl JsonErrorKind {
    /// A stable machine-readable code.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            JsonErrorKind::UnexpectedEnd => "json-unexpected-end",
            JsonErrorKind::InvalidToken => "json-invalid-token",
            JsonErrorKind::ExpectedColon => "json-expected-colon",
            JsonErrorKind::ExpectedCommaOrBracket => "json-expected-comma-or-bracket",
            JsonErrorKind::ExpectedCommaOrBrace => "json-expected-comma-or-brace",
            JsonErrorKind::ExpectedMemberName => "json-expected-member-name",
            JsonErrorKind::TrailingData => "json-trailing-data",
            JsonErrorKind::InvalidNumber => "json-invalid-number",
            JsonErrorKind::NumberOverflow => "json-number-overflow",
            JsonErrorKind::NumberNotExact { .. } => "json-number-not-exact",
            JsonErrorKind::NumberTooLong { .. } => "json-number-too-long",
            JsonErrorKind::InvalidUtf8 => "json-invalid-utf8",
            JsonErrorKind::ControlCharacter => "json-control-character",
            JsonErrorKind::InvalidEscape => "json-invalid-escape",
            JsonErrorKind::InvalidUnicodeEscape => "json-invalid-unicode-escape",
            JsonErrorKind::LoneHighSurrogate => "json-lone-high-surrogate",
            JsonErrorKind::LoneLowSurrogate => "json-lone-low-surrogate",
            JsonErrorKind::DuplicateMemberName { .. } => "json-duplicate-member-name",
            JsonErrorKind::LeadingBom => "json-leading-bom",
            JsonErrorKind::TooDeep { .. } => "json-too-deep",
            JsonErrorKind::InputTooLarge { .. } => "json-input-too-large",
        }
    }
}

impl fmt::Display for JsonErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonErrorKind::UnexpectedEnd => f.write_str("unexpected end of input"),
            JsonErrorKind::InvalidToken => f.write_str("invalid token"),
            JsonErrorKind::ExpectedColon => f.write_str("expected ':'"),
            JsonErrorKind::ExpectedCommaOrBracket => f.write_str("expected ',' or ']'"),
            JsonErrorKind::ExpectedCommaOrBrace => f.write_str("expected ',' or '}'"),
            JsonErrorKind::ExpectedMemberName => f.write_str("expected a member name"),
            JsonErrorKind::TrailingData => f.write_str("trailing data after the value"),
            JsonErrorKind::InvalidNumber => f.write_str("invalid number"),
            JsonErrorKind::NumberOverflow => f.write_str("number overflows an IEEE-754 double"),
            JsonErrorKind::NumberNotExact { canonical } => write!(
                f,
                "number is not exactly preserved (RFC 8785 would emit {canonical})"
            ),
            JsonErrorKind::NumberTooLong { max } => {
                write!(f, "number literal longer than {max} bytes")
            }
            JsonErrorKind::InvalidUtf8 => f.write_str("invalid UTF-8"),
            JsonErrorKind::ControlCharacter => f.write_str("raw control character in string"),
            JsonErrorKind::InvalidEscape => f.write_str("invalid escape"),
            JsonErrorKind::InvalidUnicodeEscape => f.write_str("invalid \\u escape"),
            JsonErrorKind::LoneHighSurrogate => f.write_str("lone high surrogate"),
            JsonErrorKind::LoneLowSurrogate => f.write_str("lone low surrogate"),
            JsonErrorKind::DuplicateMemberName { name } => {
                write!(f, "duplicate member name {name:?}")
            }
            JsonErrorKind::LeadingBom => f.write_str("leading byte order mark"),
            JsonErrorKind::TooDeep { max } => write!(f, "nesting deeper than {max}"),
            JsonErrorKind::InputTooLarge { max } => {
                write!(f, "input larger than {max} bytes")
            }
        }
    }
}

/// A rejected input: the [`kind`](Self::kind), the byte offset and the JSON
/// Pointer (RFC 6901) of the value where it happened.
///
/// `Display` reads like `duplicate member name "a" at byte 13 (pointer /x/0/a)`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct JsonError {
    /// What went wrong.
    pub kind: JsonErrorKind,
    /// Byte offset in the input.
    pub offset: usize,
    /// RFC 6901 pointer of the value being parsed (`""` is the whole document).
    pub pointer: String,
}

impl JsonError {
    pub(crate) fn new(kind: JsonErrorKind, offset: usize, pointer: String) -> Self {
        JsonError {
            kind,
            offset,
            pointer,
        }
    }

    /// The stable code of the kind (see [`JsonErrorKind::code`]).
    #[must_use]
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at byte {} (pointer {})",
            self.kind,
            self.offset,
            if self.pointer.is_empty() {
                "\"\""
            } else {
                &self.pointer
            }
        )
    }
}

impl core::error::Error for JsonError {}
