//! Writes a parsed [`Document`] in RFC 8785 form into a [`Sink`].
//!
//! Iterative, like the parser, so a deep document cannot overflow the stack.

use super::Sink;
use super::parser::{Document, Entry, Node, Str, skip_plain};

/// Writes `s` as an RFC 8785 §3.2.2.2 string: only `"`, `\` and U+0000..U+001F
/// are escaped; `\b \t \n \f \r` by name, the rest as `\u00xx` (lowercase).
pub(crate) fn write_escaped<S: Sink + ?Sized>(s: &str, sink: &mut S) {
    let mut out = Vec::with_capacity(s.len() + 2);
    escape_into(s, &mut out);
    sink.write(&out);
}

/// [`write_escaped`] into a `Vec`: runs of bytes that need no escape are
/// copied in one go.
pub(crate) fn escape_into(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.push(b'"');
    let mut run = 0;
    let mut i = 0;
    loop {
        i = skip_plain(bytes, i);
        let Some(&b) = bytes.get(i) else {
            break;
        };
        if !(b < 0x20 || b == b'"' || b == b'\\') {
            i += 1;
            continue;
        }
        out.extend_from_slice(bytes.get(run..i).unwrap_or_default());
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x09 => out.extend_from_slice(b"\\t"),
            0x0A => out.extend_from_slice(b"\\n"),
            0x0C => out.extend_from_slice(b"\\f"),
            0x0D => out.extend_from_slice(b"\\r"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX.get(usize::from(b >> 4)).copied().unwrap_or(b'0'),
                HEX.get(usize::from(b & 0xF)).copied().unwrap_or(b'0'),
            ]),
        }
        i += 1;
        run = i;
    }
    out.extend_from_slice(bytes.get(run..).unwrap_or_default());
    out.push(b'"');
}

/// Which entries to leave out (fingerprint exclusions): indices into
/// `Document::entries`, sorted.
pub(crate) type Excluded<'e> = &'e [usize];

fn write_str(doc: &Document<'_>, s: Str, out: &mut Vec<u8>) {
    match s {
        // No escapes in the input: no `"`, `\` or control bytes inside, so the
        // UTF-8 bytes are already canonical.
        Str::Raw { .. } => {
            let text = doc.str(s).as_bytes();
            out.reserve(text.len() + 2);
            out.push(b'"');
            out.extend_from_slice(text);
            out.push(b'"');
        }
        Str::Unescaped { .. } => escape_into(doc.str(s), out),
    }
}

/// How many canonical bytes [`write_node`] collects before it hands them to
/// the sink: large writes keep a hasher on its fast (SIMD) path.
const CHUNK: usize = 64 << 10;

/// Writes the value `node` of `doc` (with the `excluded` entries left out)
/// into `sink`, in chunks of about [`CHUNK`] bytes.
pub(crate) fn write_node<S: Sink + ?Sized>(
    doc: &Document<'_>,
    node: usize,
    excluded: Excluded<'_>,
    sink: &mut S,
) {
    let mut buf = Vec::with_capacity(CHUNK + 1024);
    serialize(doc, node, excluded, &mut buf, &mut |buf: &mut Vec<u8>| {
        if buf.len() >= CHUNK {
            sink.write(buf);
            buf.clear();
        }
    });
    if !buf.is_empty() {
        sink.write(&buf);
    }
}

/// Appends the value `node` of `doc` (with the `excluded` entries left out)
/// to `out`.
pub(crate) fn write_node_into(
    doc: &Document<'_>,
    node: usize,
    excluded: Excluded<'_>,
    out: &mut Vec<u8>,
) {
    serialize(doc, node, excluded, out, &mut |_: &mut Vec<u8>| {});
}

/// The serializer: appends to `out`, and calls `flush` between values so a
/// streaming caller can drain `out`.
fn serialize<F: FnMut(&mut Vec<u8>)>(
    doc: &Document<'_>,
    node: usize,
    excluded: Excluded<'_>,
    out: &mut Vec<u8>,
    flush: &mut F,
) {
    // Each frame: the container's entries still to write, whether it is an
    // object, and whether anything was written yet (for commas).
    struct Frame {
        next: usize,
        end: usize,
        object: bool,
        first: bool,
    }
    let mut stack: Vec<Frame> = Vec::new();
    let mut current = Some(node);
    loop {
        if let Some(id) = current.take() {
            match doc.node(id) {
                Node::Null => out.extend_from_slice(b"null"),
                Node::True => out.extend_from_slice(b"true"),
                Node::False => out.extend_from_slice(b"false"),
                Node::Number(s) => out.extend_from_slice(doc.str(s).as_bytes()),
                Node::String(s) => write_str(doc, s, out),
                Node::Array { start, len } => {
                    out.push(b'[');
                    stack.push(Frame {
                        next: start,
                        end: start + len,
                        object: false,
                        first: true,
                    });
                }
                Node::Object { start, len } => {
                    out.push(b'{');
                    stack.push(Frame {
                        next: start,
                        end: start + len,
                        object: true,
                        first: true,
                    });
                }
            }
            flush(out);
        }
        let Some(frame) = stack.last_mut() else {
            return;
        };
        // Skip excluded entries.
        if !excluded.is_empty() {
            while frame.next < frame.end && excluded.binary_search(&frame.next).is_ok() {
                frame.next += 1;
            }
        }
        if frame.next >= frame.end {
            out.push(if frame.object { b'}' } else { b']' });
            stack.pop();
            continue;
        }
        let entry: Entry = doc
            .entries(frame.next, 1)
            .first()
            .copied()
            .unwrap_or(Entry {
                name: None,
                offset: 0,
                value: usize::MAX,
            });
        frame.next += 1;
        if !frame.first {
            out.push(b',');
        }
        frame.first = false;
        if let Some(name) = entry.name {
            write_str(doc, name, out);
            out.push(b':');
        }
        current = Some(entry.value);
    }
}
