//! Pass 1: validate the whole input and record how its objects reorder.
//!
//! Nothing is built per value. The only memory that grows with the input is
//! the [`Plan`]: for each object whose members are not already in RFC 8785
//! order (§3.2.3, by UTF-16 code units), the input offsets of its member names
//! in sorted order, plus one [`Offsets`] entry per open container while it is
//! open. Offsets take 4 bytes each below 4 GiB of input, and 2 bytes (from the
//! object's first name) in an object that spans less than 64 KiB. Pass 2
//! ([`super::emit`]) reads the input again and writes the canonical bytes
//! straight into the sink, following the plan; so the peak is the input, the
//! plan and whatever the sink keeps.
//!
//! The parser is iterative (an explicit stack), so no input and no depth limit
//! can overflow the call stack.

use crate::prelude::*;

use core::cmp::Ordering;

use super::error::{JsonError, JsonErrorKind};
use super::number::{self, NumberScratch};
use super::strings::{self, StringError, cmp_names, decode_name, push_pointer_token, same_name};
use super::{CanonicalizeOptions, Profile};

/// Byte offsets into the input: 4 bytes each when the input is shorter than
/// 4 GiB, a `usize` otherwise.
#[derive(Debug)]
pub(crate) enum Offsets {
    /// Every offset fits a `u32`.
    Narrow(Vec<u32>),
    /// Inputs of 4 GiB or more.
    Wide(Vec<usize>),
}

impl Offsets {
    fn for_input(len: usize, capacity: usize) -> Self {
        if u32::try_from(len).is_ok() {
            Offsets::Narrow(Vec::with_capacity(capacity))
        } else {
            Offsets::Wide(Vec::with_capacity(capacity))
        }
    }

    fn push(&mut self, v: usize) {
        match self {
            // `for_input` chose `Narrow` only if every offset fits.
            Offsets::Narrow(x) => x.push(u32::try_from(v).unwrap_or(u32::MAX)),
            Offsets::Wide(x) => x.push(v),
        }
    }

    /// Room for `additional` more, reserved at once (as `extend` would) so a
    /// wide object's order does not leave up to twice its size in capacity.
    fn reserve(&mut self, additional: usize) {
        match self {
            Offsets::Narrow(x) => x.reserve(additional),
            Offsets::Wide(x) => x.reserve(additional),
        }
    }

    /// The offset at `i`.
    pub(crate) fn get(&self, i: usize) -> Option<usize> {
        match self {
            Offsets::Narrow(x) => x.get(i).map(|&v| v as usize),
            Offsets::Wide(x) => x.get(i).copied(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Offsets::Narrow(x) => x.len(),
            Offsets::Wide(x) => x.len(),
        }
    }

    fn truncate(&mut self, len: usize) {
        match self {
            Offsets::Narrow(x) => x.truncate(len),
            Offsets::Wide(x) => x.truncate(len),
        }
    }

    fn set(&mut self, i: usize, v: usize) {
        match self {
            Offsets::Narrow(x) => {
                if let Some(slot) = x.get_mut(i) {
                    *slot = u32::try_from(v).unwrap_or(u32::MAX);
                }
            }
            Offsets::Wide(x) => {
                if let Some(slot) = x.get_mut(i) {
                    *slot = v;
                }
            }
        }
    }

    /// Sorts `self[start..]` by `cmp`, in place.
    fn sort_tail(&mut self, start: usize, mut cmp: impl FnMut(usize, usize) -> Ordering) {
        match self {
            Offsets::Narrow(x) => {
                if let Some(tail) = x.get_mut(start..) {
                    tail.sort_unstable_by(|a, b| cmp(*a as usize, *b as usize));
                }
            }
            Offsets::Wide(x) => {
                if let Some(tail) = x.get_mut(start..) {
                    tail.sort_unstable_by(|a, b| cmp(*a, *b));
                }
            }
        }
    }
}

/// `(offset of the first member's name, start, member count)` of each
/// reordered object, 4 bytes a field below 4 GiB of input. `start` is the
/// index of its order in `Plan::near` times two plus one, or in
/// `Plan::members` times two.
#[derive(Debug)]
enum Triples {
    Narrow(Vec<[u32; 3]>),
    Wide(Vec<[usize; 3]>),
}

impl Triples {
    fn for_input(len: usize) -> Self {
        if u32::try_from(len).is_ok() {
            Triples::Narrow(Vec::new())
        } else {
            Triples::Wide(Vec::new())
        }
    }

    fn push(&mut self, t: [usize; 3]) {
        match self {
            Triples::Narrow(x) => x.push(t.map(|v| u32::try_from(v).unwrap_or(u32::MAX))),
            Triples::Wide(x) => x.push(t),
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Triples::Narrow(x) => x.is_empty(),
            Triples::Wide(x) => x.is_empty(),
        }
    }

    fn reserve(&mut self, additional: usize) {
        match self {
            Triples::Narrow(x) => x.reserve(additional),
            Triples::Wide(x) => x.reserve(additional),
        }
    }

    /// Sorts by offset (offsets are distinct).
    fn sort(&mut self) {
        match self {
            Triples::Narrow(x) => x.sort_unstable_by_key(|t| t[0]),
            Triples::Wide(x) => x.sort_unstable_by_key(|t| t[0]),
        }
    }

    /// The triple whose offset is `first` (sorted first). `cursor` is where
    /// the previous lookup ended: the emitter mostly asks in input order, so
    /// the answer is usually right there and no search is needed.
    fn find(&self, first: usize, cursor: &mut usize) -> Option<[usize; 3]> {
        match self {
            Triples::Narrow(x) => {
                let key = u32::try_from(first).ok()?;
                find_from(x, key, cursor).map(|t| t.map(|v| v as usize))
            }
            Triples::Wide(x) => find_from(x, first, cursor),
        }
    }
}

/// The triple of `sorted` whose offset is `key`, looked for at `cursor` first,
/// then by binary search; `cursor` ends just past the answer, or where `key`
/// would stand when there is none.
fn find_from<T: Copy + Ord>(sorted: &[[T; 3]], key: T, cursor: &mut usize) -> Option<[T; 3]> {
    let at = *cursor;
    let here = sorted.get(at).map(|t| t[0]);
    let before = at.checked_sub(1).and_then(|i| sorted.get(i)).map(|t| t[0]);
    let found = if here.is_none_or(|h| h >= key) && before.is_none_or(|b| b < key) {
        if here == Some(key) { Ok(at) } else { Err(at) }
    } else {
        sorted.binary_search_by_key(&key, |t| t[0])
    };
    match found {
        Ok(i) => {
            *cursor = i + 1;
            sorted.get(i).copied()
        }
        Err(i) => {
            *cursor = i;
            None
        }
    }
}

/// A validated input and the order of its reordered objects.
#[derive(Debug)]
pub(crate) struct Plan<'a> {
    /// The whole input (valid UTF-8, since it was accepted).
    pub(crate) text: &'a str,
    /// Offset of the root value.
    pub(crate) root: usize,
    /// The objects whose members are not in canonical order, by offset.
    objects: Triples,
    /// Offsets of member names (their opening quote) in canonical order, for
    /// objects that span 64 KiB or more of input.
    members: Offsets,
    /// The same for the other objects, as offsets from the object's first
    /// name: records take half the memory.
    near: Vec<u16>,
}

/// The canonical member order of the object opening at some offset.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sorted {
    /// Start in `Plan::near` when `base` is set, else in `Plan::members`.
    start: usize,
    /// Member count.
    pub(crate) len: usize,
    /// The offset `Plan::near` counts from.
    base: Option<usize>,
}

impl Plan<'_> {
    /// The member order of the object whose first member's name (in the
    /// input) is at `first`, if it differs from the input order. `cursor`
    /// (start at 0) carries one lookup's position to the next, which makes
    /// lookups in input order cost no search.
    pub(crate) fn sorted(&self, first: usize, cursor: &mut usize) -> Option<Sorted> {
        let [key, start, len] = self.objects.find(first, cursor)?;
        Some(Sorted {
            start: start >> 1,
            len,
            base: (start & 1 == 1).then_some(key),
        })
    }

    /// The name offset of member `i` (from 0) of `sorted`'s canonical order.
    pub(crate) fn member(&self, sorted: &Sorted, i: usize) -> Option<usize> {
        match sorted.base {
            Some(base) => self
                .near
                .get(sorted.start + i)
                .map(|&delta| base + usize::from(delta)),
            None => self.members.get(sorted.start + i),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum FrameKind {
    Array,
    /// An object whose latest member's value is still being parsed.
    ObjectPending,
    /// An object between members (or before the first).
    Object,
}

struct Parser<'a, 'o> {
    bytes: &'a [u8],
    text: &'a str,
    /// Whether `text` is a prefix of the input cut at its first invalid UTF-8.
    truncated: bool,
    opts: &'o CanonicalizeOptions,
    strict: bool,
    pos: usize,
    /// One per open container.
    kinds: Vec<FrameKind>,
    /// Per open container: arrays the count of complete elements, objects
    /// the start of their members in `names`.
    frames: Offsets,
    /// The member name offsets of the open objects.
    names: Offsets,
    objects: Triples,
    members: Offsets,
    /// The canonical text of the latest number (checked, then dropped).
    number_text: String,
    numbers: NumberScratch,
    near: Vec<u16>,
    /// The latest sorted object's names (offsets, in input order) and its
    /// canonical order (indexes into them): the next object with the same
    /// names in the same order, as the records of an array have, takes that
    /// order without sorting.
    last_names: Vec<usize>,
    last_order: Vec<u32>,
}

/// Inputs from this size on get their parse stacks' room up front (here and in
/// [`super::emit`]); smaller ones grow only what they use.
pub(crate) const RESERVE_FROM_BYTES: usize = 64;

/// How many reordered objects (and, times two, remembered names) room is made
/// for when the first one is met.
const FIRST_RESERVE: usize = 8;

/// Objects with more members than this are sorted each time: the records an
/// order is reused for are small, and a large one is unlikely to repeat.
const REUSED_ORDER_MAX_MEMBERS: usize = 64;

type PResult<T> = Result<T, JsonError>;

/// Validates `input` and plans its canonical member orders.
pub(crate) fn plan<'a>(input: &'a [u8], opts: &CanonicalizeOptions) -> PResult<Plan<'a>> {
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
    // A document of a few hundred bytes (a typical request body) fills these
    // with a handful of entries each: reserving that much at once spares the
    // growth from 0 to 4 to 8 to 16. The orders of reordered objects get their
    // room when the first is met (`record_order`). Wide objects still grow.
    let room = |per: usize| {
        if input.len() < RESERVE_FROM_BYTES {
            0
        } else {
            per
        }
    };
    let mut p = Parser {
        bytes: text.as_bytes(),
        text,
        truncated,
        opts,
        strict: opts.profile == Profile::Strict,
        pos: 0,
        kinds: Vec::with_capacity(room(8)),
        frames: Offsets::for_input(input.len(), room(8)),
        names: Offsets::for_input(input.len(), room(16)),
        objects: Triples::for_input(input.len()),
        members: Offsets::for_input(input.len(), 0),
        near: Vec::new(),
        number_text: String::new(),
        numbers: NumberScratch::default(),
        last_names: Vec::new(),
        last_order: Vec::new(),
    };
    let root = p.run()?;
    // Recorded as they closed (inner first); pass 2 looks them up by offset.
    let mut objects = p.objects;
    objects.sort();
    Ok(Plan {
        text,
        root,
        objects,
        members: p.members,
        near: p.near,
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
        self.pointer_through(self.kinds.len())
    }

    /// The pointer of the innermost open container (not of a child in it).
    fn pointer_of_open_container(&self) -> String {
        self.pointer_through(self.kinds.len().saturating_sub(1))
    }

    /// The pointer made of the child being parsed in each of the outermost
    /// `frames` open containers: in an array, the index of the next element;
    /// in an object, the name of the member whose value is pending, if any
    /// (the latest name of that object, just before the names of the next
    /// object opened inside it).
    fn pointer_through(&self, frames: usize) -> String {
        // Each pending object's latest name ends where the next object's
        // names start: walk from the innermost outwards.
        let mut tokens: Vec<Token> = Vec::with_capacity(frames);
        let mut names_end = self.names.len();
        for (i, kind) in self.kinds.iter().enumerate().rev() {
            let value = self.frames.get(i).unwrap_or_default();
            if i < frames {
                tokens.push(match kind {
                    FrameKind::Array => Token::Index(value),
                    FrameKind::ObjectPending => names_end
                        .checked_sub(1)
                        .and_then(|n| self.names.get(n))
                        .map_or(Token::None, Token::Name),
                    FrameKind::Object => Token::None,
                });
            }
            if *kind != FrameKind::Array {
                names_end = value;
            }
        }
        let mut out = String::new();
        for t in tokens.iter().rev() {
            match *t {
                Token::Index(i) => {
                    out.push('/');
                    out.push_str(&i.to_string());
                }
                Token::Name(at) => {
                    out.push('/');
                    push_pointer_token(&mut out, &decode_name(self.bytes, at));
                }
                Token::None => {}
            }
        }
        out
    }

    fn run(&mut self) -> PResult<usize> {
        self.skip_ws();
        let root = self.pos;
        self.value()?;
        loop {
            // A value is complete: attach it to the open container, if any.
            let Some(&kind) = self.kinds.last() else {
                self.skip_ws();
                if self.pos < self.bytes.len() {
                    return Err(self.err(JsonErrorKind::TrailingData, self.pos));
                }
                if self.truncated {
                    return Err(self.err(JsonErrorKind::InvalidUtf8, self.bytes.len()));
                }
                return Ok(root);
            };
            let top = self.kinds.len() - 1;
            let object = match kind {
                FrameKind::Array => {
                    let count = self.frames.get(top).unwrap_or_default();
                    self.frames.set(top, count + 1);
                    false
                }
                FrameKind::ObjectPending | FrameKind::Object => {
                    if let Some(k) = self.kinds.last_mut() {
                        *k = FrameKind::Object;
                    }
                    true
                }
            };
            self.skip_ws();
            let (sep_kind, close) = if object {
                (JsonErrorKind::ExpectedCommaOrBrace, b'}')
            } else {
                (JsonErrorKind::ExpectedCommaOrBracket, b']')
            };
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.skip_ws();
                    if object {
                        self.member_name()?;
                    }
                    self.value()?;
                }
                Some(c) if c == close => {
                    self.pos += 1;
                    self.close()?;
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
    fn value(&mut self) -> PResult<()> {
        loop {
            let start = self.pos;
            match self.peek() {
                None => return Err(self.end_err(start)),
                Some(b'n') => self.literal(b"null")?,
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'"') => self.string()?,
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(open @ (b'[' | b'{')) => {
                    if self.kinds.len() >= self.opts.max_depth {
                        return Err(self.err(
                            JsonErrorKind::TooDeep {
                                max: self.opts.max_depth,
                            },
                            start,
                        ));
                    }
                    self.pos += 1;
                    if open == b'[' {
                        self.kinds.push(FrameKind::Array);
                        self.frames.push(0);
                    } else {
                        self.kinds.push(FrameKind::Object);
                        self.frames.push(self.names.len());
                    }
                    self.skip_ws();
                    let close = if open == b'[' { b']' } else { b'}' };
                    if self.peek() == Some(close) {
                        self.pos += 1;
                        return self.close();
                    }
                    if open == b'{' {
                        self.member_name()?;
                    }
                    continue;
                }
                Some(_) => return Err(self.err(JsonErrorKind::InvalidToken, start)),
            }
            return Ok(());
        }
    }

    fn literal(&mut self, word: &[u8]) -> PResult<()> {
        let end = self.pos + word.len();
        match self.bytes.get(self.pos..end) {
            Some(w) if w == word => {
                self.pos = end;
                Ok(())
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

    fn number(&mut self) -> PResult<()> {
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
        self.number_text.clear();
        match number::canonicalize(
            literal,
            plain,
            self.strict,
            &mut self.numbers,
            &mut self.number_text,
        ) {
            Ok(_) => {
                self.pos = end;
                Ok(())
            }
            Err(kind) => Err(self.err(kind, start)),
        }
    }

    /// Parses a member name and the `:` after it, and records the name.
    fn member_name(&mut self) -> PResult<()> {
        let offset = self.pos;
        if self.peek() != Some(b'"') {
            return Err(self.unexpected(JsonErrorKind::ExpectedMemberName));
        }
        self.string()?;
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.unexpected(JsonErrorKind::ExpectedColon));
        }
        self.pos += 1;
        self.skip_ws();
        self.names.push(offset);
        if let Some(k) = self.kinds.last_mut() {
            *k = FrameKind::ObjectPending;
        }
        Ok(())
    }

    /// Closes the innermost container; for an object, checks for duplicate
    /// names and records its canonical order unless it is the input order.
    fn close(&mut self) -> PResult<()> {
        let Some(&kind) = self.kinds.last() else {
            return Err(self.err(JsonErrorKind::InvalidToken, self.pos));
        };
        let top = self.kinds.len() - 1;
        if kind != FrameKind::Array {
            let first = self.frames.get(top).unwrap_or_default();
            self.close_object(first)?;
            self.names.truncate(first);
        }
        self.kinds.pop();
        self.frames.truncate(top);
        Ok(())
    }

    fn close_object(&mut self, first: usize) -> PResult<()> {
        let len = self.names.len().saturating_sub(first);
        if len < 2 {
            return Ok(());
        }
        let bytes = self.bytes;
        // Already in order with no duplicates (strictly increasing): the
        // input order is the canonical one and nothing is recorded.
        let in_order =
            (first + 1..first + len).all(|i| match (self.names.get(i - 1), self.names.get(i)) {
                (Some(a), Some(b)) => cmp_names(bytes, a, b) == Ordering::Less,
                _ => true,
            });
        if in_order {
            return Ok(());
        }
        if self.has_last_names(first, len) {
            // The same names as the latest sorted object: no duplicates, and
            // the same canonical order.
            self.record_order(first, len, true);
            return Ok(());
        }
        let remember = len <= REUSED_ORDER_MAX_MEMBERS;
        if remember && self.last_names.capacity() == 0 {
            self.last_names.reserve(FIRST_RESERVE * 2);
            self.last_order.reserve(FIRST_RESERVE * 2);
        }
        if remember {
            self.last_names.clear();
            self.last_names
                .extend((first..first + len).filter_map(|i| self.names.get(i)));
        }
        self.names
            .sort_tail(first, |a, b| cmp_names(bytes, a, b).then(a.cmp(&b)));
        // Equal names are neighbours now; report the earliest duplicate (the
        // second of a pair) in the input.
        let mut dup: Option<usize> = None;
        for i in first + 1..first + len {
            if let (Some(a), Some(b)) = (self.names.get(i - 1), self.names.get(i))
                && cmp_names(bytes, a, b) == Ordering::Equal
                && dup.is_none_or(|d| b < d)
            {
                dup = Some(b);
            }
        }
        if let Some(d) = dup {
            self.last_names.clear();
            let name = decode_name(bytes, d);
            let mut pointer = self.pointer_of_open_container();
            pointer.push('/');
            push_pointer_token(&mut pointer, &name);
            return Err(JsonError::new(
                JsonErrorKind::DuplicateMemberName { name },
                d,
                pointer,
            ));
        }
        self.record_order(first, len, false);
        self.last_order.clear();
        if remember {
            // Offsets grow in input order, so each sorted name's index in it
            // is found by search.
            for i in first..first + len {
                let index = self
                    .names
                    .get(i)
                    .and_then(|name| self.last_names.binary_search(&name).ok());
                self.last_order
                    .push(index.and_then(|x| u32::try_from(x).ok()).unwrap_or(0));
            }
        } else {
            self.last_names.clear();
        }
        Ok(())
    }

    /// Records the canonical order of the open object's `len` names from
    /// `first`: sorted there already, or (`reused`) in the latest sorted
    /// object's order. Keyed by the first name in the input, the smallest
    /// offset; as offsets from it when the names span less than 64 KiB.
    fn record_order(&mut self, first: usize, len: usize, reused: bool) {
        let (Some(key), Some(last)) = (
            (first..first + len).filter_map(|i| self.names.get(i)).min(),
            (first..first + len).filter_map(|i| self.names.get(i)).max(),
        ) else {
            return;
        };
        let near = last - key <= usize::from(u16::MAX);
        let start = if near {
            self.near.len()
        } else {
            self.members.len()
        };
        if self.objects.is_empty() {
            // The first reordered object: a request body usually has a few more
            // (the records of an array), so room for them is reserved at once.
            self.objects.reserve(FIRST_RESERVE);
            self.near.reserve(FIRST_RESERVE * 4);
        }
        self.objects
            .push([key, (start << 1) | usize::from(near), len]);
        if near {
            self.near.reserve(len);
        } else {
            self.members.reserve(len);
        }
        for j in 0..len {
            let index = if reused {
                self.last_order.get(j).map(|&i| i as usize)
            } else {
                Some(j)
            };
            let Some(name) = index.and_then(|i| self.names.get(first + i)) else {
                continue;
            };
            if near {
                self.near
                    .push(u16::try_from(name - key).unwrap_or(u16::MAX));
            } else {
                self.members.push(name);
            }
        }
    }

    /// Whether the open object's `len` names from `first` are, byte for byte
    /// and in order, those of the latest sorted object.
    fn has_last_names(&self, first: usize, len: usize) -> bool {
        len == self.last_names.len()
            && self.last_names.iter().enumerate().all(|(k, &earlier)| {
                self.names
                    .get(first + k)
                    .is_some_and(|name| same_name(self.bytes, name, earlier))
            })
    }

    /// Validates a string starting at `"`.
    fn string(&mut self) -> PResult<()> {
        match strings::string_end(self.bytes, self.pos) {
            Ok(end) => {
                self.pos = end;
                Ok(())
            }
            Err(StringError::End) => Err(self.end_err(self.bytes.len())),
            Err(StringError::Invalid(kind, at)) => Err(self.err(kind, at)),
        }
    }
}

/// One open container's part of a pointer.
enum Token {
    /// An array: the index of the element being parsed.
    Index(usize),
    /// An object with a pending member: the offset of its name.
    Name(usize),
    /// An object between members.
    None,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The cursor only saves searches: every lookup, in any order, finds
        /// what a binary search finds.
        #[test]
        fn a_lookup_from_the_cursor_finds_what_a_search_finds(
            mut keys in proptest::collection::vec(0u32..400, 0..40),
            queries in proptest::collection::vec(0u32..410, 0..80),
        ) {
            keys.sort_unstable();
            keys.dedup();
            let triples: Vec<[u32; 3]> = keys.iter().map(|&k| [k, k + 1, k + 2]).collect();
            let mut cursor = 0;
            for q in queries {
                let expected = triples
                    .binary_search_by_key(&q, |t| t[0])
                    .ok()
                    .map(|i| triples[i]);
                prop_assert_eq!(find_from(&triples, q, &mut cursor), expected);
                prop_assert!(cursor <= triples.len());
            }
        }
    }

    #[test]
    fn lookups_in_input_order_walk_the_cursor_forward() {
        let triples = [[3u32, 0, 2], [9, 2, 2], [20, 4, 3]];
        let mut cursor = 0;
        assert_eq!(find_from(&triples, 1, &mut cursor), None);
        assert_eq!(cursor, 0);
        assert_eq!(find_from(&triples, 3, &mut cursor), Some([3, 0, 2]));
        assert_eq!(find_from(&triples, 5, &mut cursor), None);
        assert_eq!(cursor, 1);
        assert_eq!(find_from(&triples, 20, &mut cursor), Some([20, 4, 3]));
        assert_eq!(cursor, 3);
        assert_eq!(find_from(&triples, 9, &mut cursor), Some([9, 2, 2]));
        assert_eq!(cursor, 2);
    }
}
