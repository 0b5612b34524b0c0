//! RFC 6901 JSON Pointers, used to select fingerprinted fields.

use core::fmt;

use super::parser::{Document, Node, push_pointer_token};

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

impl std::error::Error for PointerError {}

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
    /// The whole document.
    Root(usize),
    /// A member or element: the entry index (in `Document::entries`) and its
    /// value node.
    Entry { entry: usize, value: usize },
}

impl Target {
    pub(crate) fn value(self) -> usize {
        match self {
            Target::Root(v) | Target::Entry { value: v, .. } => v,
        }
    }
}

/// RFC 6901 §4 evaluation. Array indices are `0` or digits without a leading
/// zero; `-` and anything else select nothing. A path through an entry listed
/// in `skip` (sorted entry indices) selects nothing either.
pub(crate) fn resolve(doc: &Document<'_>, pointer: &JsonPointer, skip: &[usize]) -> Option<Target> {
    let mut target = Target::Root(doc.root);
    for token in &pointer.tokens {
        let (start, len, object) = match doc.node(target.value()) {
            Node::Object { start, len } => (start, len, true),
            Node::Array { start, len } => (start, len, false),
            _ => return None,
        };
        let entries = doc.entries(start, len);
        let found = if object {
            // Names are unique, so a linear scan finds at most one.
            entries
                .iter()
                .position(|e| e.name.is_some_and(|n| doc.str(n) == token.as_str()))
        } else {
            parse_index(token).filter(|&i| i < len)
        }?;
        let entry = entries.get(found)?;
        if skip.binary_search(&(start + found)).is_ok() {
            return None;
        }
        target = Target::Entry {
            entry: start + found,
            value: entry.value,
        };
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
