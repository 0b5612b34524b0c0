//! Pass 2: reads the validated input again and writes its RFC 8785 bytes,
//! following the [`Plan`] for objects whose members reorder.
//!
//! Each value is written straight into the output as it is read: arrays,
//! strings and numbers in input order, members of an object in input order
//! unless the plan lists its sorted order, in which case the emitter jumps to
//! each member in turn and, after the last, resumes past the object. Iterative,
//! so a deep document cannot overflow the call stack; per open container it
//! keeps one byte, plus a small frame for a reordered object.

use crate::prelude::*;

use super::number::{self, NumberScratch};
use super::plan::{Plan, Sorted};
use super::strings::{skip_string, write_string};

/// Which entries to leave out (fingerprint exclusions), sorted: the offset of
/// a member's name or of an array element's value.
pub(crate) type Excluded<'e> = &'e [usize];

const ARRAY: u8 = 0;
const OBJECT: u8 = 1;
const SORTED: u8 = 2;
const KIND: u8 = 3;
/// Set once a container has written its first child (a comma comes next).
const WRITTEN: u8 = 4;

/// A reordered object being written.
struct SortedFrame {
    /// Its canonical order, and the next member's index in it.
    order: Sorted,
    next: usize,
    /// The furthest input offset reached in it: past its last member in the
    /// input once all are written.
    resume: usize,
}

enum Step {
    /// Write the value at `pos`.
    Value,
    /// Write the next child of the innermost container (`pos` is at it for
    /// input-order containers).
    Child,
    /// A value ended at `pos`.
    After,
}

/// The offset of the first byte at or after `i` that is not JSON whitespace.
pub(super) fn skip_ws(bytes: &[u8], mut i: usize) -> usize {
    while matches!(bytes.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The offset just past the (validated) value at `at`.
pub(crate) fn skip_value(bytes: &[u8], at: usize) -> usize {
    let mut depth = 0usize;
    let mut i = at;
    loop {
        match bytes.get(i) {
            None => return bytes.len(),
            Some(b'"') => i = skip_string(bytes, i),
            Some(b'[' | b'{') => {
                depth += 1;
                i += 1;
                continue;
            }
            Some(b']' | b'}') => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Some(b' ' | b'\t' | b'\n' | b'\r' | b',' | b':') => {
                i += 1;
                continue;
            }
            Some(_) => {
                // A literal or a number: up to the next delimiter.
                while bytes.get(i).is_some_and(|b| {
                    !matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b',' | b':' | b']' | b'}')
                }) {
                    i += 1;
                }
            }
        }
        if depth == 0 {
            return i;
        }
    }
}

/// Writes the value at `at` of `plan` (with the `excluded` entries left out)
/// into `out`, calling `flush` between values so a streaming caller can drain
/// it.
pub(crate) fn emit<F: FnMut(&mut Vec<u8>)>(
    plan: &Plan<'_>,
    at: usize,
    excluded: Excluded<'_>,
    out: &mut Vec<u8>,
    flush: &mut F,
) {
    let bytes = plan.text.as_bytes();
    let mut numbers = NumberScratch::default();
    let mut number_text = String::new();
    // As in the plan: room for a request body's few levels at once.
    let room = if bytes.len() < super::plan::RESERVE_FROM_BYTES {
        0
    } else {
        8
    };
    let mut kinds: Vec<u8> = Vec::with_capacity(room);
    let mut sorted: Vec<SortedFrame> = Vec::new();
    let mut plan_cursor = 0;
    let mut pos = at;
    let mut step = Step::Value;
    loop {
        match step {
            Step::Value => {
                pos = skip_ws(bytes, pos);
                step = Step::After;
                match bytes.get(pos) {
                    Some(b'n') => {
                        out.extend_from_slice(b"null");
                        pos += 4;
                    }
                    Some(b't') => {
                        out.extend_from_slice(b"true");
                        pos += 4;
                    }
                    Some(b'f') => {
                        out.extend_from_slice(b"false");
                        pos += 5;
                    }
                    Some(b'"') => pos = write_string(bytes, pos, out),
                    Some(b'-' | b'0'..=b'9') => {
                        let Ok((end, plain)) = number::scan(bytes, pos) else {
                            return;
                        };
                        let literal = plan.text.get(pos..end).unwrap_or_default();
                        // Pass 1 checked exactness; the canonical text is the
                        // same without checking again.
                        let written = number::write_canonical(
                            literal,
                            plain,
                            false,
                            &mut numbers,
                            &mut number_text,
                            out,
                        );
                        if written.is_err() {
                            return;
                        }
                        pos = end;
                    }
                    Some(b'[') => {
                        out.push(b'[');
                        pos = skip_ws(bytes, pos + 1);
                        if bytes.get(pos) == Some(&b']') {
                            out.push(b']');
                            pos += 1;
                        } else {
                            kinds.push(ARRAY);
                            step = Step::Child;
                        }
                    }
                    Some(b'{') => {
                        out.push(b'{');
                        let first = skip_ws(bytes, pos + 1);
                        if let Some(s) = plan.sorted(first, &mut plan_cursor) {
                            kinds.push(SORTED);
                            sorted.push(SortedFrame {
                                order: s,
                                next: 0,
                                resume: pos + 1,
                            });
                            step = Step::Child;
                        } else {
                            pos = skip_ws(bytes, pos + 1);
                            if bytes.get(pos) == Some(&b'}') {
                                out.push(b'}');
                                pos += 1;
                            } else {
                                kinds.push(OBJECT);
                                step = Step::Child;
                            }
                        }
                    }
                    _ => return,
                }
                flush(out);
            }
            Step::Child => {
                let Some(tag) = kinds.last_mut() else {
                    return;
                };
                let kind = *tag & KIND;
                if kind == SORTED {
                    let Some(f) = sorted.last_mut() else {
                        return;
                    };
                    if f.next >= f.order.len {
                        // Past the member that came last in the input, then
                        // past the `}`.
                        pos = skip_ws(bytes, f.resume) + 1;
                        out.push(b'}');
                        sorted.pop();
                        kinds.pop();
                        step = Step::After;
                        continue;
                    }
                    let Some(m) = plan.member(&f.order, f.next) else {
                        return;
                    };
                    f.next += 1;
                    pos = m;
                }
                step = Step::Value;
                if !excluded.is_empty() && excluded.binary_search(&pos).is_ok() {
                    if kind != ARRAY {
                        pos = skip_ws(bytes, skip_string(bytes, pos)) + 1;
                    }
                    pos = skip_value(bytes, skip_ws(bytes, pos));
                    step = Step::After;
                    continue;
                }
                if *tag & WRITTEN != 0 {
                    out.push(b',');
                }
                *tag |= WRITTEN;
                if kind != ARRAY {
                    pos = write_string(bytes, pos, out);
                    // The `:` after the name.
                    pos = skip_ws(bytes, pos) + 1;
                    out.push(b':');
                }
            }
            Step::After => {
                let Some(&tag) = kinds.last() else {
                    return;
                };
                match tag & KIND {
                    SORTED => {
                        if let Some(f) = sorted.last_mut() {
                            f.resume = f.resume.max(pos);
                        }
                        step = Step::Child;
                    }
                    kind => {
                        pos = skip_ws(bytes, pos);
                        match bytes.get(pos) {
                            Some(b',') => {
                                pos = skip_ws(bytes, pos + 1);
                                step = Step::Child;
                            }
                            Some(b']' | b'}') => {
                                out.push(if kind == ARRAY { b']' } else { b'}' });
                                pos += 1;
                                kinds.pop();
                            }
                            _ => return,
                        }
                    }
                }
            }
        }
    }
}

/// Writes the value at `at` of `plan` into `sink` in chunks of about
/// [`CHUNK`] bytes (large writes keep a hasher on its fast path).
pub(crate) fn emit_to<S: super::Sink + ?Sized>(
    plan: &Plan<'_>,
    at: usize,
    excluded: Excluded<'_>,
    sink: &mut S,
) {
    let mut buf = Vec::with_capacity(CHUNK + 1024);
    emit(plan, at, excluded, &mut buf, &mut |buf: &mut Vec<u8>| {
        if buf.len() >= CHUNK {
            sink.write(buf);
            buf.clear();
        }
    });
    if !buf.is_empty() {
        sink.write(&buf);
    }
}

/// Appends the value at `at` of `plan` (with the `excluded` entries left out)
/// to `out`.
pub(crate) fn emit_into(plan: &Plan<'_>, at: usize, excluded: Excluded<'_>, out: &mut Vec<u8>) {
    emit(plan, at, excluded, out, &mut |_: &mut Vec<u8>| {});
}

/// How many canonical bytes [`emit_to`] collects before it hands them to the
/// sink.
const CHUNK: usize = 64 << 10;
