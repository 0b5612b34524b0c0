//! The one-pass parser: bytes → a flat arena of nodes that borrow the input.
//!
//! Nothing is allocated per node: scalars and strings without escapes are
//! ranges of the input, strings with escapes are unescaped into one shared
//! buffer, and container children are ranges of one shared `entries` vector.
//! Object members are sorted (by UTF-16 code units, RFC 8785 §3.2.3) when the
//! object closes; duplicates are then neighbours.
//!
//! The parser is iterative (an explicit stack), so no input and no depth limit
//! can overflow the call stack.

use core::cmp::Ordering;

use super::error::{JsonError, JsonErrorKind};
use super::number::{self, NumberScratch};
use super::{CanonicalizeOptions, Profile};

/// A string value: either a range of the input (no escapes, so it can be
/// written back byte for byte) or a range of the unescape buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Str {
    Raw { start: usize, end: usize },
    Unescaped { start: usize, end: usize },
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Node {
    Null,
    True,
    False,
    /// The canonical text: a range of the input when the literal is already
    /// canonical, else of the unescape buffer.
    Number(Str),
    String(Str),
    /// `entries[start..start + len]`.
    Array {
        start: usize,
        len: usize,
    },
    /// `entries[start..start + len]`, sorted by name.
    Object {
        start: usize,
        len: usize,
    },
}

/// A child of a container: the member name (objects only) and the value node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub(crate) name: Option<Str>,
    /// Byte offset of the member name (0 for array elements).
    pub(crate) offset: usize,
    pub(crate) value: usize,
}

/// A parsed, validated document. Node 0 is not special; `root` is.
#[derive(Debug)]
pub(crate) struct Document<'a> {
    pub(crate) text: &'a str,
    pub(crate) unescaped: String,
    pub(crate) nodes: Vec<Node>,
    pub(crate) entries: Vec<Entry>,
    pub(crate) root: usize,
}

impl<'a> Document<'a> {
    pub(crate) fn str(&self, s: Str) -> &str {
        match s {
            Str::Raw { start, end } => self.text.get(start..end),
            Str::Unescaped { start, end } => self.unescaped.get(start..end),
        }
        .unwrap_or_default()
    }

    pub(crate) fn node(&self, id: usize) -> Node {
        self.nodes.get(id).copied().unwrap_or(Node::Null)
    }

    pub(crate) fn entries(&self, start: usize, len: usize) -> &[Entry] {
        self.entries
            .get(start..start.saturating_add(len))
            .unwrap_or_default()
    }
}

/// RFC 8785 §3.2.3: compare names as arrays of UTF-16 code units.
pub(crate) fn utf16_cmp(a: &str, b: &str) -> Ordering {
    // UTF-8 byte order equals code point order, which equals UTF-16 order
    // unless a supplementary character meets U+E000..U+FFFF. Compare bytes up
    // to the first difference and only decode there.
    let (ab, bb) = (a.as_bytes(), b.as_bytes());
    let common = ab.iter().zip(bb).take_while(|(x, y)| x == y).count();
    match (ab.get(common), bb.get(common)) {
        // One is a prefix of the other (or they are equal).
        (None, _) | (_, None) => return ab.len().cmp(&bb.len()),
        // Byte order is UTF-16 order unless one side is a supplementary
        // character (lead byte F0..F4) and the other U+E000..U+FFFF (lead byte
        // EE or EF): only then can both differing bytes be 0xEE or above.
        (Some(&x), Some(&y)) if x < 0xEE || y < 0xEE => return x.cmp(&y),
        _ => {}
    }
    // Back up to the start of the character that differs.
    let mut start = common;
    while start > 0 && !a.is_char_boundary(start) {
        start -= 1;
    }
    let ra = a.get(start..).unwrap_or_default();
    let rb = b.get(start..).unwrap_or_default();
    ra.encode_utf16().cmp(rb.encode_utf16())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum FrameKind {
    Array,
    Object,
}

struct Frame {
    kind: FrameKind,
    /// Where this container's entries start in `scratch`.
    scratch_start: usize,
    node: usize,
}

struct Parser<'a, 'o> {
    bytes: &'a [u8],
    text: &'a str,
    /// Whether `text` is a prefix of the input cut at its first invalid UTF-8.
    truncated: bool,
    opts: &'o CanonicalizeOptions,
    pos: usize,
    nodes: Vec<Node>,
    entries: Vec<Entry>,
    scratch: Vec<Entry>,
    stack: Vec<Frame>,
    unescaped: String,
    numbers: NumberScratch,
}

type PResult<T> = Result<T, JsonError>;

pub(crate) fn parse<'a>(input: &'a [u8], opts: &CanonicalizeOptions) -> PResult<Document<'a>> {
    if input.len() > opts.max_input_len {
        return Err(JsonError::new(
            JsonErrorKind::InputTooLarge {
                max: opts.max_input_len,
            },
            opts.max_input_len,
            String::new(),
        ));
    }
    // Validate UTF-8 once; the parser then works on the valid prefix and
    // reports the cut as invalid UTF-8 when it reaches it, so errors still come
    // in document order with their pointer.
    let (text, truncated) = match core::str::from_utf8(input) {
        Ok(t) => (t, false),
        Err(e) => (
            input
                .get(..e.valid_up_to())
                .and_then(|p| core::str::from_utf8(p).ok())
                .unwrap_or_default(),
            true,
        ),
    };
    if text.starts_with('\u{feff}') {
        return Err(JsonError::new(JsonErrorKind::LeadingBom, 0, String::new()));
    }
    let mut p = Parser {
        bytes: text.as_bytes(),
        text,
        truncated,
        opts,
        pos: 0,
        // A guess that avoids most regrowth (a value takes at least two
        // bytes with its separator; number arrays average ~8): regrowing
        // copies every node and entry. Capped at a few MiB: in wasm, reserved
        // memory is committed and linear memory never shrinks, so a 4 MB body
        // must not reserve tens of MiB up front; past the caps, growth is
        // amortized.
        nodes: Vec::with_capacity((input.len() / 4).clamp(1, 1 << 17)),
        entries: Vec::with_capacity((input.len() / 6).clamp(1, 1 << 16)),
        scratch: Vec::with_capacity((input.len() / 6).clamp(1, 1 << 16)),
        stack: Vec::new(),
        unescaped: String::new(),
        numbers: NumberScratch::default(),
    };
    let root = p.run()?;
    Ok(Document {
        text,
        unescaped: p.unescaped,
        nodes: p.nodes,
        entries: p.entries,
        root,
    })
}

impl Parser<'_, '_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn err(&self, kind: JsonErrorKind, offset: usize) -> JsonError {
        JsonError::new(kind, offset, self.pointer())
    }

    /// The error for "needed a byte at `offset`, found the end of the text".
    fn end_err(&self, offset: usize) -> JsonError {
        if self.truncated {
            self.err(JsonErrorKind::InvalidUtf8, self.bytes.len())
        } else {
            self.err(JsonErrorKind::UnexpectedEnd, offset)
        }
    }

    /// Error for an unexpected byte (or the end) at the current position.
    fn unexpected(&self, kind: JsonErrorKind) -> JsonError {
        if self.peek().is_none() {
            self.end_err(self.pos)
        } else {
            self.err(kind, self.pos)
        }
    }

    /// RFC 6901 pointer of the value being parsed.
    fn pointer(&self) -> String {
        self.pointer_through(self.stack.len())
    }

    /// The pointer of the innermost open container (not of a child in it).
    fn pointer_of_open_container(&self) -> String {
        self.pointer_through(self.stack.len().saturating_sub(1))
    }

    /// The pointer made of the child being parsed in each of the outermost
    /// `frames` open containers: in an array, the index of the next element
    /// (elements are pushed to `scratch` when complete); in an object, the
    /// name of the member whose value is pending (pushed with
    /// `value == usize::MAX` when its name is read), if any.
    fn pointer_through(&self, frames: usize) -> String {
        let mut out = String::new();
        for (i, frame) in self.stack.iter().enumerate().take(frames) {
            let end = self
                .stack
                .get(i + 1)
                .map_or(self.scratch.len(), |f| f.scratch_start);
            match frame.kind {
                FrameKind::Array => {
                    out.push('/');
                    out.push_str(&end.saturating_sub(frame.scratch_start).to_string());
                }
                FrameKind::Object => {
                    if end > frame.scratch_start
                        && let Some(e) = self.scratch.get(end - 1)
                        && e.value == usize::MAX
                        && let Some(name) = e.name
                    {
                        out.push('/');
                        push_pointer_token(&mut out, self.str(name));
                    }
                }
            }
        }
        out
    }

    fn str(&self, s: Str) -> &str {
        match s {
            Str::Raw { start, end } => self.text.get(start..end),
            Str::Unescaped { start, end } => self.unescaped.get(start..end),
        }
        .unwrap_or_default()
    }

    fn push_node(&mut self, node: Node) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn run(&mut self) -> PResult<usize> {
        self.skip_ws();
        let mut value = self.value()?;
        loop {
            // `value` is complete: attach it to the open container, if any.
            let Some(frame) = self.stack.last() else {
                self.skip_ws();
                if self.pos < self.bytes.len() {
                    return Err(self.err(JsonErrorKind::TrailingData, self.pos));
                }
                if self.truncated {
                    return Err(self.err(JsonErrorKind::InvalidUtf8, self.bytes.len()));
                }
                return Ok(value);
            };
            let kind = frame.kind;
            match kind {
                FrameKind::Array => {
                    self.scratch.push(Entry {
                        name: None,
                        offset: 0,
                        value,
                    });
                }
                FrameKind::Object => {
                    if let Some(e) = self.scratch.last_mut() {
                        e.value = value;
                    }
                }
            }
            self.skip_ws();
            let (sep_kind, close) = match kind {
                FrameKind::Array => (JsonErrorKind::ExpectedCommaOrBracket, b']'),
                FrameKind::Object => (JsonErrorKind::ExpectedCommaOrBrace, b'}'),
            };
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.skip_ws();
                    if kind == FrameKind::Object {
                        self.member_name()?;
                    }
                    value = self.value()?;
                }
                Some(c) if c == close => {
                    self.pos += 1;
                    value = self.close()?;
                }
                _ => {
                    let mut e = self.unexpected(sep_kind);
                    e.pointer = self.pointer_of_open_container();
                    return Err(e);
                }
            }
        }
    }

    /// Parses a value; for `[` or `{` opens the container and keeps descending
    /// until a complete value (a scalar or an empty container) is found.
    fn value(&mut self) -> PResult<usize> {
        loop {
            let start = self.pos;
            let node = match self.peek() {
                None => return Err(self.end_err(start)),
                Some(b'n') => self.literal(b"null", Node::Null)?,
                Some(b't') => self.literal(b"true", Node::True)?,
                Some(b'f') => self.literal(b"false", Node::False)?,
                Some(b'"') => {
                    let s = self.string()?;
                    Node::String(s)
                }
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(open @ (b'[' | b'{')) => {
                    if self.stack.len() >= self.opts.max_depth {
                        return Err(self.err(
                            JsonErrorKind::TooDeep {
                                max: self.opts.max_depth,
                            },
                            start,
                        ));
                    }
                    self.pos += 1;
                    let kind = if open == b'[' {
                        FrameKind::Array
                    } else {
                        FrameKind::Object
                    };
                    let node = self.push_node(Node::Null);
                    self.stack.push(Frame {
                        kind,
                        scratch_start: self.scratch.len(),
                        node,
                    });
                    self.skip_ws();
                    let close = if open == b'[' { b']' } else { b'}' };
                    if self.peek() == Some(close) {
                        self.pos += 1;
                        return self.close();
                    }
                    if kind == FrameKind::Object {
                        self.member_name()?;
                    }
                    continue;
                }
                Some(_) => return Err(self.err(JsonErrorKind::InvalidToken, start)),
            };
            return Ok(self.push_node(node));
        }
    }

    fn literal(&mut self, word: &[u8], node: Node) -> PResult<Node> {
        let end = self.pos + word.len();
        match self.bytes.get(self.pos..end) {
            Some(w) if w == word => {
                self.pos = end;
                Ok(node)
            }
            _ => {
                // A prefix of the word cut by the end is "unexpected end".
                let rest = self.bytes.get(self.pos..).unwrap_or_default();
                if rest.len() < word.len() && word.starts_with(rest) {
                    Err(self.end_err(self.bytes.len()))
                } else {
                    Err(self.err(JsonErrorKind::InvalidToken, self.pos))
                }
            }
        }
    }

    fn number(&mut self) -> PResult<Node> {
        let start = self.pos;
        let (end, plain) = match number::scan(self.bytes, start) {
            Ok(scanned) => scanned,
            Err((kind, at)) => {
                if at >= self.bytes.len() {
                    return Err(self.end_err(at));
                }
                return Err(self.err(kind, at));
            }
        };
        if end - start > self.opts.max_number_len {
            return Err(self.err(
                JsonErrorKind::NumberTooLong {
                    max: self.opts.max_number_len,
                },
                start,
            ));
        }
        let literal = self.text.get(start..end).unwrap_or_default();
        let strict = self.opts.profile == Profile::Strict;
        let buf_start = self.unescaped.len();
        match number::canonicalize(
            literal,
            plain,
            strict,
            &mut self.numbers,
            &mut self.unescaped,
        ) {
            Ok(number::Canonical::Literal) => {
                self.pos = end;
                Ok(Node::Number(Str::Raw { start, end }))
            }
            Ok(number::Canonical::Appended) => {
                self.pos = end;
                Ok(Node::Number(Str::Unescaped {
                    start: buf_start,
                    end: self.unescaped.len(),
                }))
            }
            Err(kind) => Err(self.err(kind, start)),
        }
    }

    /// Parses a member name and the `:` after it, and pushes the pending entry.
    fn member_name(&mut self) -> PResult<()> {
        let offset = self.pos;
        if self.peek() != Some(b'"') {
            return Err(self.unexpected(JsonErrorKind::ExpectedMemberName));
        }
        let name = self.string()?;
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.unexpected(JsonErrorKind::ExpectedColon));
        }
        self.pos += 1;
        self.skip_ws();
        self.scratch.push(Entry {
            name: Some(name),
            offset,
            value: usize::MAX,
        });
        Ok(())
    }

    /// Closes the innermost container: sorts object members, checks for
    /// duplicates, and moves the entries to their final place.
    fn close(&mut self) -> PResult<usize> {
        let Some(frame) = self.stack.last() else {
            return Err(self.err(JsonErrorKind::InvalidToken, self.pos));
        };
        let (kind, node, scratch_start) = (frame.kind, frame.node, frame.scratch_start);
        let start = self.entries.len();
        let len = self.scratch.len().saturating_sub(scratch_start);
        if kind == FrameKind::Object && len > 1 {
            let (text, unescaped) = (self.text, &self.unescaped);
            let name_of = |e: &Entry| -> &str {
                match e.name {
                    Some(Str::Raw { start, end }) => text.get(start..end),
                    Some(Str::Unescaped { start, end }) => unescaped.get(start..end),
                    None => None,
                }
                .unwrap_or_default()
            };
            let members = self.scratch.get_mut(scratch_start..).unwrap_or_default();
            members.sort_unstable_by(|a, b| {
                utf16_cmp(name_of(a), name_of(b)).then(a.offset.cmp(&b.offset))
            });
            let mut dup: Option<Entry> = None;
            for pair in members.windows(2) {
                if let [a, b] = pair
                    && name_of(a) == name_of(b)
                    && dup.is_none_or(|d| b.offset < d.offset)
                {
                    dup = Some(*b);
                }
            }
            if let Some(d) = dup {
                let name = name_of(&d).to_owned();
                // Point at the duplicate member itself.
                let mut pointer = self.pointer_of_open_container();
                pointer.push('/');
                push_pointer_token(&mut pointer, &name);
                return Err(JsonError::new(
                    JsonErrorKind::DuplicateMemberName { name },
                    d.offset,
                    pointer,
                ));
            }
        }
        self.entries
            .extend_from_slice(self.scratch.get(scratch_start..).unwrap_or_default());
        self.scratch.truncate(scratch_start);
        self.stack.pop();
        if let Some(slot) = self.nodes.get_mut(node) {
            *slot = match kind {
                FrameKind::Array => Node::Array { start, len },
                FrameKind::Object => Node::Object { start, len },
            };
        }
        Ok(node)
    }

    /// Parses a string starting at `"`. Strings without escapes stay borrowed.
    fn string(&mut self) -> PResult<Str> {
        let open = self.pos;
        let start = open + 1;
        let mut i = skip_plain(self.bytes, start);
        // Fast path: no escapes.
        loop {
            match self.bytes.get(i) {
                None => return Err(self.end_err(i)),
                Some(b'"') => {
                    self.pos = i + 1;
                    return Ok(Str::Raw { start, end: i });
                }
                Some(b'\\') => break,
                Some(&b) if b < 0x20 => {
                    return Err(self.err(JsonErrorKind::ControlCharacter, i));
                }
                Some(_) => i = skip_plain(self.bytes, i + 1),
            }
        }
        let buf_start = self.unescaped.len();
        self.unescaped
            .push_str(self.text.get(start..i).unwrap_or_default());
        let mut run = i;
        loop {
            match self.bytes.get(i) {
                None => return Err(self.end_err(i)),
                Some(b'"') => {
                    self.unescaped
                        .push_str(self.text.get(run..i).unwrap_or_default());
                    self.pos = i + 1;
                    return Ok(Str::Unescaped {
                        start: buf_start,
                        end: self.unescaped.len(),
                    });
                }
                Some(b'\\') => {
                    self.unescaped
                        .push_str(self.text.get(run..i).unwrap_or_default());
                    i = self.escape(i)?;
                    run = i;
                }
                Some(&b) if b < 0x20 => {
                    return Err(self.err(JsonErrorKind::ControlCharacter, i));
                }
                Some(_) => i = skip_plain(self.bytes, i + 1),
            }
        }
    }

    /// Decodes the escape at `at` (a backslash) into the unescape buffer and
    /// returns the offset after it.
    fn escape(&mut self, at: usize) -> PResult<usize> {
        let c = match self.bytes.get(at + 1) {
            None => return Err(self.end_err(at + 1)),
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                let hi = self.hex4(at)?;
                let (c, next) = match hi {
                    0xD800..=0xDBFF => {
                        let follows = self.bytes.get(at + 6..at + 8) == Some(b"\\u");
                        let lo = if follows { self.hex4(at + 6)? } else { 0 };
                        if !(0xDC00..=0xDFFF).contains(&lo) {
                            return Err(self.err(JsonErrorKind::LoneHighSurrogate, at));
                        }
                        let cp =
                            0x10000 + ((u32::from(hi) - 0xD800) << 10) + (u32::from(lo) - 0xDC00);
                        (char::from_u32(cp), at + 12)
                    }
                    0xDC00..=0xDFFF => {
                        return Err(self.err(JsonErrorKind::LoneLowSurrogate, at));
                    }
                    _ => (char::from_u32(u32::from(hi)), at + 6),
                };
                let Some(c) = c else {
                    return Err(self.err(JsonErrorKind::InvalidUnicodeEscape, at));
                };
                self.unescaped.push(c);
                return Ok(next);
            }
            Some(_) => return Err(self.err(JsonErrorKind::InvalidEscape, at)),
        };
        self.unescaped.push(c);
        Ok(at + 2)
    }

    /// The four hex digits of the `\u` escape at `at`.
    fn hex4(&self, at: usize) -> PResult<u16> {
        let mut v: u16 = 0;
        for k in 0..4 {
            let i = at + 2 + k;
            let d = match self.bytes.get(i) {
                None => return Err(self.end_err(i)),
                Some(&b) => match b {
                    b'0'..=b'9' => b - b'0',
                    b'a'..=b'f' => b - b'a' + 10,
                    b'A'..=b'F' => b - b'A' + 10,
                    _ => return Err(self.err(JsonErrorKind::InvalidUnicodeEscape, at)),
                },
            };
            v = (v << 4) | u16::from(d);
        }
        Ok(v)
    }
}

/// The offset of the first byte at or after `i` that is `"`, `\\` or a control
/// byte (U+0000..U+001F), eight bytes at a time; may stop early (up to eight
/// bytes before the end), so callers finish byte by byte.
pub(crate) fn skip_plain(bytes: &[u8], mut i: usize) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    // Non-zero iff some byte of `v` is below `n` (n <= 0x80).
    let below = |v: u64, n: u64| v.wrapping_sub(LO * n) & !v & HI;
    while let Some(chunk) = bytes.get(i..i.saturating_add(8)) {
        let Ok(chunk) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let w = u64::from_le_bytes(chunk);
        let special = below(w, 0x20)
            | below(w ^ (LO * u64::from(b'"')), 1)
            | below(w ^ (LO * u64::from(b'\\')), 1);
        if special != 0 {
            break;
        }
        i += 8;
    }
    i
}

/// Appends `token` escaped per RFC 6901 (`~` → `~0`, `/` → `~1`).
pub(crate) fn push_pointer_token(out: &mut String, token: &str) {
    for c in token.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_cmp_matches_code_unit_order() {
        let words = [
            "",
            "a",
            "ab",
            "b",
            "\u{7f}",
            "\u{80}",
            "é",
            "\u{7ff}",
            "\u{800}",
            "中",
            "\u{d7ff}",
            "\u{e000}",
            "\u{ffff}",
            "\u{10000}",
            "😀",
            "\u{10ffff}",
            "a\u{e000}",
            "a😀",
            "a\u{ffff}b",
            "a\u{10000}",
            "😀a",
            "\u{e000}a",
        ];
        for a in words {
            for b in words {
                assert_eq!(
                    utf16_cmp(a, b),
                    a.encode_utf16().cmp(b.encode_utf16()),
                    "{a:?} {b:?}"
                );
            }
        }
    }

    #[test]
    fn skip_plain_stops_at_or_before_special_bytes() {
        let text = b"abcdefghijklmnop\"qrstuvwxyz0123456789\\abcdefgh\x01ijklmnopqrstuvwx";
        let mut i = 0;
        while i < text.len() {
            let j = skip_plain(text, i);
            assert!(j >= i && j <= text.len());
            let first = text
                .iter()
                .skip(i)
                .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
                .map_or(text.len(), |p| p + i);
            assert!(j <= first, "{i} {j} {first}");
            i += 1;
        }
    }
}
