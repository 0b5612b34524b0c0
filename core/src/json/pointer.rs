//! RFC 6901 JSON Pointers, used to select fingerprinted fields.

use crate::prelude::*;

use core::fmt;

use super::emit::skip_value;
use super::plan::Plan;
use super::strings::{name_is, push_pointer_token, skip_string};

/// A parsed RFC 6901 JSON Pointer such as `/customer/email` or `/a~1b/0`.
///
/// ```
/// use idemkit_core::json::JsonPointer;
/// let p: JsonPointer = "/a~1b/m~0n".parse()?;
/// assert_eq!(p.tokens(), ["a/b", "m~n"]);
/// assert_eq!(p.to_string(), "/a~1b/m~0n");
/// # Ok::<(), idemkit_core::json::PointerError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JsonPointer {
    /// Unescaped reference tokens.
    tokens: Vec<String>,
}

/// Why a JSON Pointer was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PointerError {
    /// A non-empty pointer must start with `/`.
    MissingLeadingSlash,
    /// A `~` not followed by `0` or `1`.
    InvalidEscape {
        /// Byte offset of the `~`.
        offset: usize,
    },
}

impl PointerError {
    /// A stable machine-readable code.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            PointerError::MissingLeadingSlash => "pointer-missing-leading-slash",
            PointerError::InvalidEscape { .. } => "pointer-invalid-escape",
        }
    }
}

impl fmt::Display for PointerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PointerError::MissingLeadingSlash => {
                f.write_str("a JSON Pointer must be empty or start with '/'")
            }
            PointerError::InvalidEscape { offset } => write!(
                f,
                "invalid '~' escape at byte {offset} of the JSON Pointer (only ~0 and ~1)"
            ),
        }
    }
}

impl core::error::Error for PointerError {}

impl JsonPointer {
    /// The pointer to the whole document (`""`).
    #[must_use]
    pub fn root() -> Self {
        JsonPointer { tokens: Vec::new() }
    }

    /// The unescaped reference tokens.
    #[must_use]
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// Whether this is the whole-document pointer `""`.
    #[must_use]
    pub fn is_root(&self) -> bool {
        self.tokens.is_empty()
    }
}

impl core::str::FromStr for JsonPointer {
    type Err = PointerError;

    fn from_str(s: &str) -> Result<Self, PointerError> {
        if s.is_empty() {
            return Ok(JsonPointer::root());
        }
        let Some(rest) = s.strip_prefix('/') else {
            return Err(PointerError::MissingLeadingSlash);
        };
        let mut tokens = Vec::new();
        let mut offset = 1;
        for raw in rest.split('/') {
            let mut token = String::with_capacity(raw.len());
            let mut chars = raw.char_indices();
            while let Some((i, c)) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some((_, '0')) => token.push('~'),
                        Some((_, '1')) => token.push('/'),
                        _ => return Err(PointerError::InvalidEscape { offset: offset + i }),
                    }
                } else {
                    token.push(c);
                }
            }
            offset += raw.len() + 1;
            tokens.push(token);
        }
        Ok(JsonPointer { tokens })
    }
}

impl fmt::Display for JsonPointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        for t in &self.tokens {
            out.push('/');
            push_pointer_token(&mut out, t);
        }
        f.write_str(&out)
    }
}

/// Where a pointer leads in a document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// The whole document: the offset of its value.
    Root(usize),
    /// A member or element: the entry (the offset of a member's name or of an
    /// element's value, as exclusions name it) and the offset of its value.
    Entry { entry: usize, value: usize },
}

impl Target {
    pub(crate) fn value(self) -> usize {
        match self {
            Target::Root(v) | Target::Entry { value: v, .. } => v,
        }
    }
}

fn skip_ws(bytes: &[u8], mut i: usize) -> usize {
    while matches!(bytes.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// RFC 6901 §4 evaluation over a validated document. Array indices are `0` or
/// digits without a leading zero; `-` and anything else select nothing. A
/// path through an entry listed in `skip` (sorted entries) selects nothing
/// either.
pub(crate) fn resolve(plan: &Plan<'_>, pointer: &JsonPointer, skip: &[usize]) -> Option<Target> {
    let bytes = plan.text.as_bytes();
    let mut target = Target::Root(plan.root);
    for token in &pointer.tokens {
        let at = target.value();
        let object = match bytes.get(at) {
            Some(b'{') => true,
            Some(b'[') => false,
            _ => return None,
        };
        let index = if object {
            None
        } else {
            Some(parse_index(token)?)
        };
        let mut i = skip_ws(bytes, at + 1);
        if matches!(bytes.get(i), Some(b'}' | b']')) {
            return None;
        }
        // Children in input order; names are unique, so the first match is
        // the only one.
        let mut n = 0usize;
        let (entry, value) = loop {
            let entry = i;
            let (value, found) = if object {
                let found = name_is(bytes, i, token);
                // Past the name, the `:` and the space around it.
                (
                    skip_ws(bytes, skip_ws(bytes, skip_string(bytes, i)) + 1),
                    found,
                )
            } else {
                (i, index == Some(n))
            };
            if found {
                break (entry, value);
            }
            i = skip_ws(bytes, skip_value(bytes, value));
            if bytes.get(i) != Some(&b',') {
                return None;
            }
            i = skip_ws(bytes, i + 1);
            n += 1;
        };
        if skip.binary_search(&entry).is_ok() {
            return None;
        }
        target = Target::Entry { entry, value };
    }
    Some(target)
}

fn parse_index(token: &str) -> Option<usize> {
    let b = token.as_bytes();
    if b.is_empty() || (b.len() > 1 && b.first() == Some(&b'0')) {
        return None;
    }
    if !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    token.parse().ok()
}
