//! One pass for small inputs: validate and write at the same time, and put
//! each object's members in order when it closes.
//!
//! The two passes ([`super::plan`], then [`super::emit`]) read every string and
//! number twice; that keeps the working memory small for any size of input,
//! which matters for a document of megabytes but not for a request body of a
//! few kilobytes, whose canonical bytes are built in memory anyway (to hash
//! them, or to return them). Here each value is read once and written as it is
//! read; an object whose members are out of order is rewritten in place when it
//! closes, from a copy of its members.
//!
//! This pass reports no error detail: on anything it does not accept it gives
//! up ([`canonicalize_small`] returns `false`), and the caller runs the two
//! passes, which give the error its kind, offset and pointer. So both accept
//! exactly the same inputs, and an accepted input gets the same bytes.

use crate::prelude::*;

use core::cmp::Ordering;

use super::CanonicalizeOptions;
use super::Profile;
use super::emit::skip_ws;
use super::number::{self, NumberScratch};
use super::strings::{cmp_names, skip_plain, string_end, write_string};

/// Inputs up to this size go through one pass where the caller builds the
/// output in memory; larger ones take the two passes, whose working memory
/// does not grow with the output.
pub(crate) const MAX_INPUT_BYTES: usize = 64 << 10;

/// How many times the input's size the reordering may copy before the pass
/// gives up: each reordered object is copied once when it closes, so deep
/// nests of reordered objects copy their innermost members once per level,
/// while the two passes stay linear in any input.
const COPY_BUDGET_PER_INPUT_BYTE: usize = 4;

/// An open container.
#[derive(Clone, Copy)]
struct Open {
    /// For an object, where its members start in `members`; `None` for an
    /// array.
    members: Option<usize>,
    /// Where its content starts in the output (after `[` or `{`).
    content: usize,
}

/// A member of an open object: the input offset of its name (for ordering) and
/// where it was written in the output, without the comma before it.
#[derive(Clone, Copy)]
struct Member {
    name: usize,
    start: usize,
    end: usize,
}

/// Appends the canonical form of `input` to `out` and returns `true`, or
/// returns `false` with `out` as it was when `input` is not accepted (or is
/// larger than [`MAX_INPUT_BYTES`], or reorders more than the copy budget).
/// The callers give `out` room for about the input's size, which is usually
/// the output's.
pub(crate) fn canonicalize_small(
    input: &[u8],
    opts: &CanonicalizeOptions,
    out: &mut Vec<u8>,
) -> bool {
    let before = out.len();
    let done = input.len() <= MAX_INPUT_BYTES
        && input.len() <= opts.max_input_len
        && core::str::from_utf8(input).is_ok()
        && !input.starts_with("\u{feff}".as_bytes())
        && Pass::new(input, opts, out).run().is_some();
    if !done {
        out.truncate(before);
    }
    done
}

struct Pass<'a, 'o> {
    bytes: &'a [u8],
    opts: &'o CanonicalizeOptions,
    out: &'o mut Vec<u8>,
    open: Vec<Open>,
    members: Vec<Member>,
    /// The members of the object being reordered, copied out.
    reordered: Vec<u8>,
    copy_budget: usize,
    numbers: NumberScratch,
    number_text: String,
}

impl<'a, 'o> Pass<'a, 'o> {
    fn new(bytes: &'a [u8], opts: &'o CanonicalizeOptions, out: &'o mut Vec<u8>) -> Self {
        Pass {
            bytes,
            opts,
            out,
            open: Vec::with_capacity(8),
            members: Vec::with_capacity(16),
            reordered: Vec::new(),
            copy_budget: bytes.len().saturating_mul(COPY_BUDGET_PER_INPUT_BYTE),
            numbers: NumberScratch::default(),
            number_text: String::new(),
        }
    }

    fn skip_ws(&self, i: usize) -> usize {
        skip_ws(self.bytes, i)
    }

    /// `None` wherever the input is not accepted.
    fn run(&mut self) -> Option<()> {
        let mut pos = self.skip_ws(0);
        loop {
            pos = self.value(pos)?;
            // Close what the value completes, up to the next value to read.
            loop {
                pos = self.skip_ws(pos);
                let Some(&top) = self.open.last() else {
                    return (pos == self.bytes.len()).then_some(());
                };
                match (*self.bytes.get(pos)?, top.members) {
                    (b',', members) => {
                        if members.is_some() {
                            self.end_member();
                        }
                        self.out.push(b',');
                        pos = self.skip_ws(pos + 1);
                        if members.is_some() {
                            pos = self.member_name(pos)?;
                        }
                        break;
                    }
                    (b']', None) => {
                        self.out.push(b']');
                        self.open.pop();
                        pos += 1;
                    }
                    (b'}', Some(first)) => {
                        self.end_member();
                        self.close_object(first, top.content)?;
                        self.out.push(b'}');
                        self.open.pop();
                        pos += 1;
                    }
                    _ => return None,
                }
            }
        }
    }

    /// Writes the value at `pos` and returns the offset after it; a container
    /// is opened (and its first member's name written) and the offset of its
    /// first value returned, unless it is empty.
    fn value(&mut self, mut pos: usize) -> Option<usize> {
        loop {
            let literal: &[u8] = match *self.bytes.get(pos)? {
                b'n' => b"null",
                b't' => b"true",
                b'f' => b"false",
                b'"' => return self.string(pos),
                b'-' | b'0'..=b'9' => return self.number(pos),
                open @ (b'[' | b'{') => {
                    if self.open.len() >= self.opts.max_depth {
                        return None;
                    }
                    let object = open == b'{';
                    self.out.push(open);
                    self.open.push(Open {
                        members: object.then_some(self.members.len()),
                        content: self.out.len(),
                    });
                    pos = self.skip_ws(pos + 1);
                    let close = if object { b'}' } else { b']' };
                    if self.bytes.get(pos) == Some(&close) {
                        self.out.push(close);
                        self.open.pop();
                        return Some(pos + 1);
                    }
                    if object {
                        pos = self.member_name(pos)?;
                    }
                    continue;
                }
                _ => return None,
            };
            let end = pos + literal.len();
            if self.bytes.get(pos..end)? != literal {
                return None;
            }
            self.out.extend_from_slice(literal);
            return Some(end);
        }
    }

    /// Writes the string at `pos` (its `"`) and returns the offset after it.
    fn string(&mut self, pos: usize) -> Option<usize> {
        // Without escapes (the usual case) the string is its own canonical
        // form: found and copied in one scan.
        let mut i = skip_plain(self.bytes, pos + 1);
        loop {
            match *self.bytes.get(i)? {
                b'"' => {
                    self.out.extend_from_slice(self.bytes.get(pos..=i)?);
                    return Some(i + 1);
                }
                b'\\' => break,
                b if b < 0x20 => return None,
                _ => i = skip_plain(self.bytes, i + 1),
            }
        }
        let end = string_end(self.bytes, pos).ok()?;
        write_string(self.bytes, pos, self.out);
        Some(end)
    }

    fn number(&mut self, pos: usize) -> Option<usize> {
        let (end, plain) = number::scan(self.bytes, pos).ok()?;
        if end - pos > self.opts.max_number_len {
            return None;
        }
        let literal = core::str::from_utf8(self.bytes.get(pos..end)?).ok()?;
        number::write_canonical(
            literal,
            plain,
            self.opts.profile == Profile::Strict,
            &mut self.numbers,
            &mut self.number_text,
            self.out,
        )
        .ok()?;
        Some(end)
    }

    /// Writes the member name at `pos` and its `:`, starts the member, and
    /// returns the offset of its value.
    fn member_name(&mut self, pos: usize) -> Option<usize> {
        if self.bytes.get(pos) != Some(&b'"') {
            return None;
        }
        let start = self.out.len();
        let after = self.string(pos)?;
        let colon = self.skip_ws(after);
        if self.bytes.get(colon) != Some(&b':') {
            return None;
        }
        self.out.push(b':');
        self.members.push(Member {
            name: pos,
            start,
            end: start,
        });
        Some(self.skip_ws(colon + 1))
    }

    /// The latest member's value is complete.
    fn end_member(&mut self) {
        let end = self.out.len();
        if let Some(m) = self.members.last_mut() {
            m.end = end;
        }
    }

    /// Puts the members of the closing object (from `first` in `members`,
    /// written from `content` in the output) in canonical order; `None` on a
    /// duplicate name or when the copy budget is spent.
    fn close_object(&mut self, first: usize, content: usize) -> Option<()> {
        let bytes = self.bytes;
        let members = self.members.get_mut(first..)?;
        let in_order = members
            .windows(2)
            .all(|w| matches!(w, [a, b] if cmp_names(bytes, a.name, b.name) == Ordering::Less));
        if !in_order {
            members.sort_unstable_by(|a, b| cmp_names(bytes, a.name, b.name));
            if members
                .windows(2)
                .any(|w| matches!(w, [a, b] if cmp_names(bytes, a.name, b.name) == Ordering::Equal))
            {
                return None;
            }
            let written = self.out.len() - content;
            self.copy_budget = self.copy_budget.checked_sub(written)?;
            self.reordered.clear();
            self.reordered.extend_from_slice(self.out.get(content..)?);
            self.out.truncate(content);
            for (i, m) in members.iter().enumerate() {
                if i > 0 {
                    self.out.push(b',');
                }
                let part = self.reordered.get(m.start - content..m.end - content)?;
                self.out.extend_from_slice(part);
            }
        }
        self.members.truncate(first);
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{canonicalize_to, emit_into, plan};
    use proptest::prelude::*;

    fn two_passes(input: &[u8], opts: &CanonicalizeOptions) -> Option<Vec<u8>> {
        let doc = plan(input, opts).ok()?;
        let mut out = Vec::new();
        emit_into(&doc, doc.root, &[], &mut out);
        Some(out)
    }

    fn one_pass(input: &[u8], opts: &CanonicalizeOptions) -> Option<Vec<u8>> {
        let mut out = b"kept".to_vec();
        let done = canonicalize_small(input, opts, &mut out);
        assert!(
            out.starts_with(b"kept"),
            "what was in the output was changed"
        );
        if !done {
            assert_eq!(out, b"kept", "a refused input left bytes in the output");
            return None;
        }
        Some(out.split_off(4))
    }

    fn assert_same(input: &[u8]) {
        for profile in [Profile::Strict, Profile::Rfc8785] {
            let opts = CanonicalizeOptions::default().profile(profile);
            assert_eq!(
                one_pass(input, &opts),
                two_passes(input, &opts),
                "{profile:?} on {:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn reorders_nested_objects_as_the_two_passes_do() {
        assert_same(br#"{"b":{"d":[1,{"z":0,"y":1}],"c":2},"a":null,"\u0061b":"\n"}"#);
        assert_same(br#" { "\u20ac" : 1 , "\ud83d\ude00" : 2 , "a" : [ ] , "" : { } } "#);
        assert_same(br#"[1.0, 1e0, -0, 1E400, 9007199254740993, 0.1e-7, "x\/y"]"#);
    }

    #[test]
    fn refuses_what_the_two_passes_refuse() {
        for bad in [
            &br#"{"a":1,"a":2}"#[..],
            br#"{"a":1,"\u0061":2}"#,
            br#"[1,]"#,
            br#"{"a" 1}"#,
            b"[\"\x01\"]",
            b"[\"abcdefgh\x1f\"]",
            b"[\"\\n\x1f\"]",
            br#""\ud800""#,
            br#""\udc00x""#,
            br#""\q""#,
            b"\xef\xbb\xbf{}",
            b"[1] 2",
            b"[",
            b"",
            b"nul",
            b"[01]",
            b"\"\xff\"",
        ] {
            assert_same(bad);
            assert!(one_pass(bad, &CanonicalizeOptions::default()).is_none());
        }
    }

    #[test]
    fn the_limits_are_the_two_passes_limits() {
        let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
        assert_same(deep.as_bytes());
        let opts = CanonicalizeOptions::default().max_number_len(3);
        assert_eq!(one_pass(b"[1234]", &opts), None);
        assert_eq!(one_pass(b"[123]", &opts), Some(b"[123]".to_vec()));
        let opts = CanonicalizeOptions::default().max_input_len(4);
        assert_eq!(one_pass(b"[1,2]", &opts), None);
    }

    #[test]
    fn deep_reordered_nests_and_large_inputs_are_left_to_the_two_passes() {
        // Every level is out of order: each close copies everything inside it.
        let mut deep = String::from("1");
        for _ in 0..40 {
            deep = format!(r#"{{"b":{deep},"a":0}}"#);
        }
        let opts = CanonicalizeOptions::default();
        assert_eq!(one_pass(deep.as_bytes(), &opts), None);
        let canonical = crate::json::canonicalize(deep.as_bytes()).ok();
        assert_eq!(canonical, two_passes(deep.as_bytes(), &opts));
        assert!(canonical.is_some());
        let large = format!("[{}0]", "0,".repeat(MAX_INPUT_BYTES / 2));
        assert_eq!(one_pass(large.as_bytes(), &opts), None);
        let mut streamed = Vec::new();
        canonicalize_to(large.as_bytes(), &opts, &mut streamed).unwrap();
        assert_eq!(two_passes(large.as_bytes(), &opts), Some(streamed));
    }

    /// JSON text with whitespace, escapes, numbers in several spellings and
    /// members in any order, sometimes broken by a byte changed.
    fn json_text() -> impl Strategy<Value = String> {
        let name = prop_oneof![
            "[a-c]{0,2}",
            Just(r"\u0061".to_owned()),
            Just("\u{e9}".to_owned()),
            Just(r"\ud83d\ude00".to_owned()),
            Just("\u{1f600}".to_owned()),
        ];
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just("false".to_owned()),
            "-?(0|[1-9][0-9]{0,3})(\\.[0-9]{1,3})?([eE][-+]?[0-9]{1,3})?",
            name.clone().prop_map(|s| format!("\"{s}\"")),
            Just(r#""\n\t\"\\\/""#.to_owned()),
        ];
        leaf.prop_recursive(4, 40, 5, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5)
                    .prop_map(|items| format!("[ {} ]", items.join(" ,"))),
                prop::collection::vec((name.clone(), inner), 0..5).prop_map(|members| {
                    let parts: Vec<String> = members
                        .into_iter()
                        .map(|(k, v)| format!("\"{k}\" :{v}"))
                        .collect();
                    format!("{{{}}}", parts.join(","))
                }),
            ]
        })
    }

    proptest! {
        #[test]
        fn one_pass_gives_the_two_passes_answer(text in json_text(), flip in any::<Option<(usize, u8)>>()) {
            let mut input = text.into_bytes();
            if let Some((at, byte)) = flip
                && !input.is_empty()
            {
                let at = at % input.len();
                input[at] = byte;
            }
            for profile in [Profile::Strict, Profile::Rfc8785] {
                let opts = CanonicalizeOptions::default().profile(profile);
                prop_assert_eq!(one_pass(&input, &opts), two_passes(&input, &opts));
            }
        }

        #[test]
        fn any_bytes_get_the_two_passes_answer(input in prop::collection::vec(any::<u8>(), 0..64)) {
            let opts = CanonicalizeOptions::default();
            prop_assert_eq!(one_pass(&input, &opts), two_passes(&input, &opts));
        }
    }
}
