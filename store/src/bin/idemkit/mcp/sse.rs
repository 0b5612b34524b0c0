//! Server-sent events, as far as the gateway needs them: an answer to a POST
//! may be an SSE stream carrying notifications and server-to-client requests
//! before the JSON-RPC response. Events pass through byte for byte; the one
//! that carries the awaited response is held back, so the gateway can record
//! (or rewrite) it before the client sees it.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt;
use serde_json::Value;

/// One event as received: its bytes (terminator included) and its `data`.
pub(crate) struct Event {
    pub(crate) raw: Bytes,
    pub(crate) data: String,
    pub(crate) id: Option<String>,
}

/// Splits a byte stream into events (WHATWG HTML, "event stream
/// interpretation": lines end in CRLF, LF or CR; a blank line ends an event).
#[derive(Default)]
pub(crate) struct Parser {
    buffer: Vec<u8>,
}

impl Parser {
    /// Feeds `chunk`; returns the events it completed.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<Event> {
        self.buffer.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(end) = event_end(&self.buffer) {
            let raw: Vec<u8> = self.buffer.drain(..end).collect();
            events.push(parse_event(raw));
        }
        events
    }

    /// What is left when the stream ends: an unterminated event, if any.
    pub(crate) fn finish(self) -> Option<Event> {
        (!self.buffer.iter().all(u8::is_ascii_whitespace)).then(|| parse_event(self.buffer))
    }
}

/// The end (exclusive) of the first complete event in `buffer`.
fn event_end(buffer: &[u8]) -> Option<usize> {
    let mut i = 0;
    let mut line_was_empty = true;
    while i < buffer.len() {
        let (ends_line, width) = match (buffer.get(i), buffer.get(i + 1)) {
            (Some(b'\r'), Some(b'\n')) => (true, 2),
            // A CR at the end of what arrived may be half of a CRLF.
            (Some(b'\r'), None) => return None,
            (Some(b'\r' | b'\n'), _) => (true, 1),
            _ => (false, 1),
        };
        if ends_line {
            if line_was_empty && i > 0 {
                return Some(i + width);
            }
            line_was_empty = true;
        } else {
            line_was_empty = false;
        }
        i += width;
    }
    None
}

fn parse_event(raw: Vec<u8>) -> Event {
    let text = String::from_utf8_lossy(&raw);
    let mut data: Vec<&str> = Vec::new();
    let mut id = None;
    for line in text.split(['\n', '\r']) {
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => data.push(value),
            "id" => id = Some(value.to_owned()),
            _ => {}
        }
    }
    let data = data.join("\n");
    Event {
        raw: Bytes::from(raw),
        data,
        id,
    }
}

/// An event carrying `message`, under the event id `id` if the original had one.
pub(crate) fn event(id: Option<&str>, message: &Value) -> Bytes {
    let mut out = String::new();
    if let Some(id) = id {
        out.push_str("id: ");
        out.push_str(id);
        out.push('\n');
    }
    out.push_str("event: message\ndata: ");
    out.push_str(&message.to_string());
    out.push_str("\n\n");
    Bytes::from(out)
}

/// Whether `data` is the JSON-RPC response to request `id`; the message if so.
pub(crate) fn response_to(data: &str, id: &Value) -> Option<Value> {
    let message: Value = serde_json::from_str(data).ok()?;
    let answers = message.get("method").is_none()
        && (message.get("result").is_some() || message.get("error").is_some())
        && message.get("id") == Some(id);
    answers.then_some(message)
}

/// Why a stream stopped before its response.
pub(crate) enum Stopped {
    /// The stream ended (or broke) without the response.
    Ended,
    /// The deadline passed.
    TimedOut,
}

/// Relays `body`'s events to `out` until the one that answers `id`, which is
/// returned (not sent) with its event id. A client that went away does not stop
/// the relay: the response still comes back to be recorded.
pub(crate) async fn relay_until_response(
    mut body: Body,
    id: &Value,
    out: &tokio::sync::mpsc::Sender<Bytes>,
    deadline: Option<tokio::time::Instant>,
) -> Result<(Value, Option<String>), Stopped> {
    let mut parser = Parser::default();
    loop {
        let next = match deadline {
            Some(at) => match tokio::time::timeout_at(at, body.frame()).await {
                Ok(frame) => frame,
                Err(_) => return Err(Stopped::TimedOut),
            },
            None => body.frame().await,
        };
        let events = match next {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => parser.push(&data),
                Err(_) => continue,
            },
            Some(Err(_)) | None => {
                let last = std::mem::take(&mut parser).finish();
                if let Some(message) = last.as_ref().and_then(|e| response_to(&e.data, id)) {
                    return Ok((message, last.and_then(|e| e.id)));
                }
                return Err(Stopped::Ended);
            }
        };
        for event in events {
            if let Some(message) = response_to(&event.data, id) {
                return Ok((message, event.id));
            }
            let _ = out.send(event.raw).await;
        }
    }
}

/// A response body fed by a channel.
pub(crate) struct ChannelBody(pub(crate) tokio::sync::mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(Frame::data(c))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_on_blank_lines_of_any_line_ending() {
        let mut p = Parser::default();
        let mut events = p.push(b"event: message\ndata: {\"a\":1}\n\nid: 7\r\ndata: x\r\n");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, "{\"a\":1}");
        events = p.push(b"data: y\r\n\r");
        assert!(events.is_empty(), "a CR may be half of a CRLF");
        events = p.push(b"\n: comment\n\n");
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].data, "x\ny");
        assert_eq!(events[0].id.as_deref(), Some("7"));
        assert_eq!(
            events[0].raw.as_ref(),
            b"id: 7\r\ndata: x\r\ndata: y\r\n\r\n"
        );
        assert_eq!(events[1].data, "");
        assert!(p.finish().is_none());
    }

    #[test]
    fn only_the_answer_to_the_id_is_the_response() {
        let id = serde_json::json!(3);
        assert!(response_to(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#, &id).is_some());
        assert!(response_to(r#"{"jsonrpc":"2.0","id":"3","result":{}}"#, &id).is_none());
        assert!(
            response_to(
                r#"{"jsonrpc":"2.0","id":3,"method":"elicitation/create"}"#,
                &id
            )
            .is_none()
        );
        assert!(
            response_to(
                r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#,
                &id
            )
            .is_none()
        );
    }
}
