//! Writes a parsed [`Document`] in RFC 8785 form into a [`Sink`].
//!
//! Iterative, like the parser, so a deep document cannot overflow the stack.

use super::Sink;
use super::number;
use super::parser::{Document, Entry, Node, Str};

/// Writes `s` as an RFC 8785 §3.2.2.2 string: only `"`, `\` and U+0000..U+001F
/// are escaped; `\b \t \n \f \r` by name, the rest as `\u00xx` (lowercase).
pub(crate) fn write_escaped<S: Sink + ?Sized>(s: &str, sink: &mut S) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    sink.write(b"\"");
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x09 => b"\\t",
            0x0A => b"\\n",
            0x0C => b"\\f",
            0x0D => b"\\r",
            0x00..=0x1F => b"",
            _ => continue,
        };
        sink.write(bytes.get(run..i).unwrap_or_default());
        if short.is_empty() {
            let hex = [
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX.get(usize::from(b >> 4)).copied().unwrap_or(b'0'),
                HEX.get(usize::from(b & 0xF)).copied().unwrap_or(b'0'),
            ];
            sink.write(&hex);
        } else {
            sink.write(short);
        }
        run = i + 1;
    }
    sink.write(bytes.get(run..).unwrap_or_default());
    sink.write(b"\"");
}

/// Which entries to leave out (fingerprint exclusions): indices into
/// `Document::entries`, sorted.
pub(crate) type Excluded<'e> = &'e [usize];

fn write_str<S: Sink + ?Sized>(doc: &Document<'_>, s: Str, sink: &mut S) {
    match s {
        // No escapes in the input: no `"`, `\` or control bytes inside, so the
        // UTF-8 bytes are already canonical.
        Str::Raw { .. } => {
            sink.write(b"\"");
            sink.write(doc.str(s).as_bytes());
            sink.write(b"\"");
        }
        Str::Unescaped { .. } => write_escaped(doc.str(s), sink),
    }
}

/// Writes the value `node` of `doc` (with the `excluded` entries left out).
pub(crate) fn write_node<S: Sink + ?Sized>(
    doc: &Document<'_>,
    node: usize,
    excluded: Excluded<'_>,
    sink: &mut S,
) {
    let mut buffer = ryu_js::Buffer::new();
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
                Node::Null => sink.write(b"null"),
                Node::True => sink.write(b"true"),
                Node::False => sink.write(b"false"),
                Node::Number(v) => sink.write(number::format(v, &mut buffer).as_bytes()),
                Node::String(s) => write_str(doc, s, sink),
                Node::Array { start, len } => {
                    sink.write(b"[");
                    stack.push(Frame {
                        next: start,
                        end: start + len,
                        object: false,
                        first: true,
                    });
                }
                Node::Object { start, len } => {
                    sink.write(b"{");
                    stack.push(Frame {
                        next: start,
                        end: start + len,
                        object: true,
                        first: true,
                    });
                }
            }
        }
        let Some(frame) = stack.last_mut() else {
            return;
        };
        // Skip excluded entries.
        while frame.next < frame.end && excluded.binary_search(&frame.next).is_ok() {
            frame.next += 1;
        }
        if frame.next >= frame.end {
            sink.write(if frame.object { b"}" } else { b"]" });
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
            sink.write(b",");
        }
        frame.first = false;
        if let Some(name) = entry.name {
            write_str(doc, name, sink);
            sink.write(b":");
        }
        current = Some(entry.value);
    }
}
