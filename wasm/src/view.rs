//! A record's read-only view as JSON text plus one byte buffer, for
//! `decodeRecord` (see `wasm/js/api.js`, which names the fields).
//!
//! Setting a dozen properties on a JavaScript object from WebAssembly is one
//! crossing each; writing the same fields as JSON here and letting JavaScript
//! `JSON.parse` them is a single crossing and about a third of the time. JSON
//! has no bytes and no 64-bit integers, so:
//!
//! - `lastToken` is a decimal string (JavaScript makes it a `bigint`);
//! - the response body and each header value are `[start, end]` ranges into
//!   the byte buffer returned beside the text (JavaScript slices them out).
//!
//! The fields are positional (see [`record_view`]), in the order of the
//! `RecordView` type in `index.d.ts`.

use std::io::Write as _;

use idemkit_core::UnixMillis;
use idemkit_core::record::{EffectKind, Record, RecordState, StepState, StoredResponse};

/// The view of `record`: JSON text and the bytes its ranges point into.
///
/// The text is an array, its members in the order of the `RecordView` fields
/// (names would be most of the text to parse): `[fingerprint, fingerprintScheme,
/// effect, state, attempt, lastToken, steps, createdAt, updatedAt, replayUntil,
/// keepUntil, ...the state's own]`, where each step is `[name, state,
/// providerKey, providerRef, startedAt, doneAt]` and the state's own fields are
/// `owner, leaseExpiresAt` (running), `response, completedAt` (completed, the
/// response as `[status, headers, body, resourceRef]`, each header `[name,
/// range]`), `reason, since` (unknown) or `releasedAt` (released).
#[must_use]
pub fn record_view(record: &Record) -> (String, Vec<u8>) {
    let mut out = Json {
        text: Vec::with_capacity(256),
        bytes: Vec::new(),
    };
    out.raw("[\"");
    for &byte in record.fingerprint.as_bytes() {
        out.text.extend_from_slice(&idemkit_core::hex::digits(byte));
    }
    out.raw("\",");
    out.number(u64::from(record.fingerprint_scheme));
    out.raw(",");
    out.string(match record.effect {
        EffectKind::Local => "local",
        EffectKind::External => "external",
    });
    out.raw(",");
    out.string(record.state.name().as_str());
    out.raw(",");
    out.number(u64::from(record.attempt));
    out.raw(",\"");
    out.number(record.last_token.get());
    out.raw("\",[");
    for (i, step) in record.steps.iter().enumerate() {
        out.raw(if i == 0 { "[" } else { ",[" });
        out.string(&step.name);
        out.raw(",");
        out.string(match step.state {
            StepState::Started => "started",
            StepState::Done => "done",
        });
        out.raw(",");
        out.string(&step.provider_key);
        out.raw(",");
        out.optional_string(step.provider_ref.as_deref());
        out.raw(",");
        out.millis(step.started_at);
        out.raw(",");
        out.optional_millis(step.done_at);
        out.raw("]");
    }
    out.raw("],");
    out.millis(record.created_at);
    out.raw(",");
    out.millis(record.updated_at);
    out.raw(",");
    out.optional_millis(record.replay_until);
    out.raw(",");
    out.optional_millis(record.keep_until);
    out.raw(",");
    match &record.state {
        RecordState::Running { lease } => {
            out.string(&lease.owner);
            out.raw(",");
            out.millis(lease.expires_at);
        }
        RecordState::Completed {
            response,
            completed_at,
        } => {
            out.response(response);
            out.raw(",");
            out.millis(*completed_at);
        }
        RecordState::Unknown { reason, since } => {
            out.string(&reason.to_string());
            out.raw(",");
            out.millis(*since);
        }
        RecordState::Released { at } => out.millis(*at),
    }
    out.raw("]");
    // Every piece written was UTF-8 (`str`s and ASCII), so this cannot fail.
    let text = String::from_utf8(out.text)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    (text, out.bytes)
}

struct Json {
    /// The JSON text as UTF-8 bytes: core's string writer appends to bytes, so
    /// a string goes in without a buffer of its own.
    text: Vec<u8>,
    bytes: Vec<u8>,
}

impl Json {
    fn raw(&mut self, text: &str) {
        self.text.extend_from_slice(text.as_bytes());
    }

    fn number(&mut self, n: u64) {
        // Writing to a String cannot fail.
        let _ = write!(self.text, "{n}");
    }

    /// Milliseconds as JavaScript reads them: past 2^53 (only "never" gets
    /// there) the nearest double, as the number the view held before.
    fn millis(&mut self, t: UnixMillis) {
        self.number(t.as_millis());
    }

    fn optional_millis(&mut self, t: Option<UnixMillis>) {
        match t {
            Some(t) => self.millis(t),
            None => self.raw("null"),
        }
    }

    /// A JSON string literal, escaped as core writes canonical JSON.
    fn string(&mut self, s: &str) {
        idemkit_core::json::write_string(s, &mut self.text);
    }

    fn optional_string(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.string(s),
            None => self.raw("null"),
        }
    }

    /// `[start, end]` of `bytes`, appended to the byte buffer.
    fn range(&mut self, bytes: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(bytes);
        let _ = write!(self.text, "[{start},{}]", self.bytes.len());
    }

    fn response(&mut self, response: &StoredResponse) {
        self.raw("[");
        self.number(u64::from(response.status));
        self.raw(",[");
        for (i, (name, value)) in response.headers.iter().enumerate() {
            self.raw(if i == 0 { "[" } else { ",[" });
            self.string(name);
            self.raw(",");
            self.range(value);
            self.raw("]");
        }
        self.raw("],");
        match &response.body {
            Some(body) => self.range(body),
            None => self.raw("null"),
        }
        self.raw(",");
        self.optional_string(response.resource_ref.as_deref());
        self.raw("]");
    }
}

#[cfg(test)]
mod tests {
    use idemkit_core::machine::{self, ClaimRequest, Op, Policy};
    use idemkit_core::record::FencingToken;
    use idemkit_core::{Fingerprint, RequestFingerprint};
    use serde_json::{Value, json};

    use super::*;

    fn at(ms: u64) -> UnixMillis {
        UnixMillis::from_millis(ms)
    }

    fn running(owner: &str) -> Record {
        let op = Op::Claim {
            request: ClaimRequest {
                fingerprint: RequestFingerprint::body_only(Fingerprint::from_bytes([7; 32])),
                owner: owner.to_owned(),
            },
            token_floor: 0,
        };
        match machine::apply(None, &op, &Policy::default(), at(1_000)) {
            Ok(machine::Decision {
                write: machine::Write::Put(record),
                ..
            }) => record,
            other => panic!("a new claim writes a record: {other:?}"),
        }
    }

    fn parse(record: &Record) -> (Value, Vec<u8>) {
        let (text, bytes) = record_view(record);
        let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        (value, bytes)
    }

    #[test]
    fn a_running_record_names_its_owner_and_escapes_it() {
        let (view, bytes) = parse(&running("worker \"7\"\\\n\u{1}é"));
        assert_eq!(view[0], json!("07".repeat(32)));
        assert_eq!(view[3], json!("running"));
        assert_eq!(view[5], json!("1"), "lastToken, as decimal text");
        assert_eq!(view[6], json!([]), "no steps");
        assert_eq!(view[7], json!(1_000), "createdAt");
        assert_eq!(view[11], json!("worker \"7\"\\\n\u{1}é"), "owner");
        assert_eq!(view.as_array().map(Vec::len), Some(13));
        assert!(bytes.is_empty());
    }

    #[test]
    fn a_completed_record_points_into_the_bytes_for_its_body_and_header_values() {
        let record = running("w");
        let op = Op::Complete {
            token: FencingToken::new(1).unwrap_or_else(|| panic!("token 1")),
            response: StoredResponse {
                status: 201,
                headers: vec![
                    ("content-type".into(), b"application/json".to_vec()),
                    ("location".into(), b"/p/1".to_vec()),
                ],
                body: Some(b"{\"id\":1}".to_vec()),
                resource_ref: Some("p_1".into()),
            },
        };
        let done = match machine::apply(Some(&record), &op, &Policy::default(), at(2_000)) {
            Ok(machine::Decision {
                write: machine::Write::Put(record),
                ..
            }) => record,
            other => panic!("completion writes: {other:?}"),
        };
        let (view, bytes) = parse(&done);
        assert_eq!(view[3], json!("completed"));
        let response = &view[11];
        assert_eq!(response[0], json!(201), "status");
        assert_eq!(response[3], json!("p_1"), "resourceRef");
        let slice = |range: &Value| {
            let (a, b) = (
                range[0].as_u64().unwrap_or(0),
                range[1].as_u64().unwrap_or(0),
            );
            bytes
                .get(a as usize..b as usize)
                .unwrap_or_default()
                .to_vec()
        };
        assert_eq!(slice(&response[2]), b"{\"id\":1}", "body");
        assert_eq!(response[1][0][0], json!("content-type"));
        assert_eq!(slice(&response[1][0][1]), b"application/json");
        assert_eq!(slice(&response[1][1][1]), b"/p/1");
        assert_eq!(view[12], json!(2_000), "completedAt");
    }
}
