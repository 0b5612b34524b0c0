//! The HTTP contract (docs/architecture.md, "HTTP contract"), as plain values.
//!
//! Both the tower/axum middleware and the JavaScript `handle` build their answers
//! from here, so a client sees the same statuses, problem types and headers from
//! every idemkit server:
//!
//! | situation | answer |
//! |---|---|
//! | key required but missing | 400 `missing-idempotency-key` |
//! | key malformed | 400 `invalid-idempotency-key` |
//! | same key, different fingerprint | 422 `idempotency-key-reused` (409 configurable) |
//! | same key, still running | 409 `request-in-progress` + `Retry-After` |
//! | same key, outcome unknown | 409 `outcome-uncertain` + the log reference |
//! | the handler answered, but its outcome could not be recorded | 409 `outcome-uncertain`, `code: outcome-not-recorded`, the log reference and the handler's status |
//! | same key, completed | the stored response + `Idempotent-Replayed: true` |
//! | completed, response no longer kept | 410 `response-expired` + the resource reference |
//! | store unavailable | 503 `store-unavailable` + `Retry-After` |
//! | same key, still running, asked to wait, but too many already wait | 503 `too-many-waiters` + `Retry-After` |
//! | body too large | 413 `body-too-large` |
//! | body unreadable for its content type (not I-JSON, bad form) | 400 `invalid-request-body` |
//! | no principal | 401 `unauthenticated` |
//!
//! [`reply()`] maps what a binding knows ([`Outcome`]: a claim's outcome or a
//! [`Refusal`]) to what it sends ([`Reply`]); [`defaults`] holds the numbers
//! the bindings share (recording retries, lease renewal, limits).
//!
//! Errors are `application/problem+json` (RFC 9457). The body is canonical JSON
//! (members sorted), so it is byte-identical across implementations.

use crate::prelude::*;

use core::time::Duration;

use crate::key::KeyError;
use crate::scope::LogRef;

pub mod defaults;
mod headers;
pub mod prefer;
mod reply;

pub use headers::{
    DEFAULT_REPLAYED_HEADERS, NEVER_STORED_HEADERS, ReplayedHeaderError, ReplayedHeaders,
    is_never_stored_header, is_replayable_header,
};
pub use reply::{Outcome, Reply, reply};

/// The header that carries the key (draft-ietf-httpapi-idempotency-key-header).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// The header set on every replayed response.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
/// The media type of problem bodies (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";
/// The prefix of every problem `type` URI idemkit sends; the last path segment is
/// the stable problem name that clients compare.
pub const PROBLEM_TYPE_BASE: &str = "https://idemkit.dev/problems/";

/// Why a request was answered without running the handler.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The route requires a key and the request has none.
    MissingKey,
    /// The `Idempotency-Key` header is malformed.
    InvalidKey(KeyError),
    /// The key was used before with a different request fingerprint.
    KeyReused {
        /// 422 (default) or 409, per policy.
        status: u16,
    },
    /// The first request with this key is still being processed.
    InProgress {
        /// When to try again.
        retry_after: Duration,
    },
    /// The outcome of the first request is unknown; a person or reconciler must
    /// resolve it. Clients must not retry automatically.
    OutcomeUncertain {
        /// The record's log reference, to quote to an operator.
        log_ref: LogRef,
    },
    /// The handler ran and answered `original_status`, but its outcome could not
    /// be recorded (the store failed on every bounded retry of the completion).
    ///
    /// The handler's own response is **not** sent: nothing is acknowledged before
    /// it is durable, and a client shown a success it cannot replay would be told
    /// something a retry may contradict. The answer is the `outcome-uncertain`
    /// problem (409, so every idemkit client stops retrying and routes the action
    /// to a person, as for an Unknown record) with `code: outcome-not-recorded`,
    /// the log reference and `original_status`. The record is never released by
    /// this failure: it is marked Unknown when the store allows, else it stays
    /// Running and its lease's expiry decides, exactly as after a crash.
    OutcomeNotRecorded {
        /// The record's log reference, to quote to an operator.
        log_ref: LogRef,
        /// The status the handler answered.
        original_status: u16,
    },
    /// The request completed, but its stored response is past the replay window.
    ResponseExpired {
        /// The status of the original response.
        original_status: u16,
        /// The resource or provider reference of the original outcome.
        resource_ref: Option<String>,
    },
    /// The idempotency store could not be reached; nothing was executed.
    StoreUnavailable {
        /// When to try again.
        retry_after: Duration,
    },
    /// The request asked to wait for its key's running attempt, but as many
    /// requests as the route allows already wait (on this key or in all);
    /// nothing was executed.
    TooManyWaiters {
        /// When to try again.
        retry_after: Duration,
    },
    /// The request body is larger than the configured limit.
    BodyTooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// No principal (tenant) could be established for the request.
    Unauthenticated,
    /// The body cannot be fingerprinted for its content type (not I-JSON, a bad
    /// form encoding): a request whose meaning cannot be pinned down is never run.
    InvalidBody {
        /// The stable code of the fingerprint error (`json-duplicate-member`, …).
        code: String,
        /// The error's message (kind, byte offset, JSON Pointer).
        message: String,
    },
}

/// A ready-to-send answer: status, headers and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// Header names (lowercase) and values.
    pub headers: Vec<(String, String)>,
    /// The body bytes.
    pub body: Vec<u8>,
}

impl Refusal {
    /// The stable problem name (the last segment of the problem `type` URI).
    #[must_use]
    pub fn problem_name(&self) -> &'static str {
        match self {
            Refusal::MissingKey => "missing-idempotency-key",
            Refusal::InvalidKey(_) => "invalid-idempotency-key",
            Refusal::KeyReused { .. } => "idempotency-key-reused",
            Refusal::InProgress { .. } => "request-in-progress",
            Refusal::OutcomeUncertain { .. } | Refusal::OutcomeNotRecorded { .. } => {
                "outcome-uncertain"
            }
            Refusal::ResponseExpired { .. } => "response-expired",
            Refusal::StoreUnavailable { .. } => "store-unavailable",
            Refusal::TooManyWaiters { .. } => "too-many-waiters",
            Refusal::BodyTooLarge { .. } => "body-too-large",
            Refusal::Unauthenticated => "unauthenticated",
            Refusal::InvalidBody { .. } => "invalid-request-body",
        }
    }

    /// The HTTP status.
    #[must_use]
    pub fn status(&self) -> u16 {
        match self {
            Refusal::MissingKey | Refusal::InvalidKey(_) | Refusal::InvalidBody { .. } => 400,
            Refusal::KeyReused { status } => *status,
            Refusal::InProgress { .. }
            | Refusal::OutcomeUncertain { .. }
            | Refusal::OutcomeNotRecorded { .. } => 409,
            Refusal::ResponseExpired { .. } => 410,
            Refusal::StoreUnavailable { .. } | Refusal::TooManyWaiters { .. } => 503,
            Refusal::BodyTooLarge { .. } => 413,
            Refusal::Unauthenticated => 401,
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Refusal::MissingKey => "An Idempotency-Key header is required",
            Refusal::InvalidKey(_) => "The Idempotency-Key header is malformed",
            Refusal::KeyReused { .. } => {
                "This idempotency key was already used with a different request"
            }
            Refusal::InProgress { .. } => "A request with this idempotency key is in progress",
            Refusal::OutcomeUncertain { .. } => {
                "The outcome of the request with this idempotency key is unknown"
            }
            Refusal::OutcomeNotRecorded { .. } => {
                "The request was executed, but its outcome could not be recorded"
            }
            Refusal::ResponseExpired { .. } => {
                "The request completed; its response is no longer available"
            }
            Refusal::StoreUnavailable { .. } => "The idempotency store is unavailable",
            Refusal::TooManyWaiters { .. } => {
                "Too many requests already wait for this idempotency key's answer"
            }
            Refusal::BodyTooLarge { .. } => "The request body is too large",
            Refusal::Unauthenticated => "Authentication is required",
            Refusal::InvalidBody { .. } => "The request body cannot be fingerprinted",
        }
    }

    fn detail(&self) -> String {
        match self {
            Refusal::MissingKey => {
                "Send a unique Idempotency-Key header with this request and reuse it on every retry."
                    .to_owned()
            }
            Refusal::InvalidKey(e) => format!("{e}."),
            Refusal::KeyReused { .. } => "The key was first used for a request with a different \
                payload. Nothing was executed. Use a new key for a new operation."
                .to_owned(),
            Refusal::InProgress { retry_after } => format!(
                "Retry with the same key after {} seconds.",
                retry_after_secs(*retry_after)
            ),
            Refusal::OutcomeUncertain { log_ref } => format!(
                "Do not retry automatically; an operator must resolve record {log_ref}."
            ),
            Refusal::OutcomeNotRecorded {
                log_ref,
                original_status,
            } => format!(
                "The handler answered {original_status}, but the outcome was not recorded. \
                 Do not retry automatically; an operator must resolve record {log_ref}."
            ),
            Refusal::ResponseExpired { original_status, .. } => format!(
                "The request completed with status {original_status}. It was not executed again."
            ),
            Refusal::StoreUnavailable { retry_after } => format!(
                "Nothing was executed. Retry with the same key after {} seconds.",
                retry_after_secs(*retry_after)
            ),
            Refusal::TooManyWaiters { retry_after } => format!(
                "The first request with this key is still running. Nothing was executed. \
                 Retry with the same key after {} seconds.",
                retry_after_secs(*retry_after)
            ),
            Refusal::BodyTooLarge { limit } => format!("The limit is {limit} bytes."),
            Refusal::Unauthenticated => "The request carries no credentials this endpoint accepts."
                .to_owned(),
            Refusal::InvalidBody { message, .. } => format!("{message}. Nothing was executed."),
        }
    }

    /// The full answer: status, `content-type: application/problem+json`,
    /// `retry-after` where the contract has one, and the problem body.
    #[must_use]
    pub fn to_answer(&self) -> Answer {
        let status = self.status();
        let mut members: Vec<(&str, JsonText)> = vec![
            (
                "type",
                JsonText::Str(format!("{PROBLEM_TYPE_BASE}{}", self.problem_name())),
            ),
            ("title", JsonText::Str(self.title().to_owned())),
            ("status", JsonText::Int(u64::from(status))),
            ("detail", JsonText::Str(self.detail())),
        ];
        let mut headers = vec![("content-type".to_owned(), PROBLEM_JSON.to_owned())];
        match self {
            Refusal::InvalidKey(e) => members.push(("code", JsonText::Str(e.code().to_owned()))),
            Refusal::InvalidBody { code, .. } => {
                members.push(("code", JsonText::Str(code.clone())))
            }
            Refusal::InProgress { retry_after }
            | Refusal::StoreUnavailable { retry_after }
            | Refusal::TooManyWaiters { retry_after } => {
                headers.push((
                    "retry-after".to_owned(),
                    retry_after_secs(*retry_after).to_string(),
                ));
            }
            Refusal::OutcomeUncertain { log_ref } => {
                members.push(("log_ref", JsonText::Str(log_ref.to_string())));
            }
            Refusal::OutcomeNotRecorded {
                log_ref,
                original_status,
            } => {
                members.push(("code", JsonText::Str("outcome-not-recorded".to_owned())));
                members.push(("log_ref", JsonText::Str(log_ref.to_string())));
                members.push((
                    "original_status",
                    JsonText::Int(u64::from(*original_status)),
                ));
            }
            Refusal::ResponseExpired {
                original_status,
                resource_ref,
            } => {
                members.push((
                    "original_status",
                    JsonText::Int(u64::from(*original_status)),
                ));
                if let Some(reference) = resource_ref {
                    members.push(("resource_ref", JsonText::Str(reference.clone())));
                }
            }
            Refusal::BodyTooLarge { limit } => members.push(("limit", JsonText::Int(*limit))),
            _ => {}
        }
        Answer {
            status,
            headers,
            body: problem_body(members),
        }
    }
}

impl Answer {
    /// A problem answer of a binding's own, outside the contract's rows (the
    /// proxy's `upstream-unavailable`, for one): `content-type:
    /// application/problem+json` and the canonical body of `type` (`name` under
    /// [`PROBLEM_TYPE_BASE`]), `title`, `status` and `detail`.
    #[must_use]
    pub fn problem(status: u16, name: &str, title: &str, detail: &str) -> Answer {
        Answer {
            status,
            headers: vec![("content-type".to_owned(), PROBLEM_JSON.to_owned())],
            body: problem_body(vec![
                ("type", JsonText::Str(format!("{PROBLEM_TYPE_BASE}{name}"))),
                ("title", JsonText::Str(title.to_owned())),
                ("status", JsonText::Int(u64::from(status))),
                ("detail", JsonText::Str(detail.to_owned())),
            ]),
        }
    }
}

/// `Retry-After` in whole seconds, rounded up, at least 1 (RFC 9110 §10.2.3 has no
/// fractions, and 0 would invite a busy loop).
#[must_use]
pub fn retry_after_secs(duration: Duration) -> u64 {
    let secs = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    secs.max(1)
}

enum JsonText {
    Str(String),
    Int(u64),
}

/// Serializes members as canonical JSON: sorted by name (all names are ASCII, so
/// byte order is UTF-16 order) with RFC 8785 string escaping.
fn problem_body(mut members: Vec<(&str, JsonText)>) -> Vec<u8> {
    members.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = String::from("{");
    for (i, (name, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_string(&mut out, name);
        out.push(':');
        match value {
            JsonText::Str(s) => push_json_string(&mut out, s),
            JsonText::Int(n) => out.push_str(&n.to_string()),
        }
    }
    out.push('}');
    out.into_bytes()
}

fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{IdempotencyKey, Scope};

    fn body_json(answer: &Answer) -> serde_json::Value {
        serde_json::from_slice(&answer.body).unwrap()
    }

    fn header<'a>(answer: &'a Answer, name: &str) -> Option<&'a str> {
        answer
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn every_row_of_the_contract() {
        let log_ref = Scope::new("t", "op")
            .unwrap()
            .record_id(&IdempotencyKey::new("k").unwrap())
            .log_ref();
        let rows: Vec<(Refusal, u16, &str, Option<&str>)> = vec![
            (Refusal::MissingKey, 400, "missing-idempotency-key", None),
            (
                Refusal::InvalidKey(KeyError::Empty),
                400,
                "invalid-idempotency-key",
                None,
            ),
            (
                Refusal::KeyReused { status: 422 },
                422,
                "idempotency-key-reused",
                None,
            ),
            (
                Refusal::KeyReused { status: 409 },
                409,
                "idempotency-key-reused",
                None,
            ),
            (
                Refusal::InProgress {
                    retry_after: Duration::from_millis(1_500),
                },
                409,
                "request-in-progress",
                Some("2"),
            ),
            (
                Refusal::OutcomeUncertain { log_ref },
                409,
                "outcome-uncertain",
                None,
            ),
            (
                Refusal::OutcomeNotRecorded {
                    log_ref,
                    original_status: 201,
                },
                409,
                "outcome-uncertain",
                None,
            ),
            (
                Refusal::ResponseExpired {
                    original_status: 201,
                    resource_ref: Some("apt_1".into()),
                },
                410,
                "response-expired",
                None,
            ),
            (
                Refusal::StoreUnavailable {
                    retry_after: Duration::ZERO,
                },
                503,
                "store-unavailable",
                Some("1"),
            ),
            (
                Refusal::BodyTooLarge { limit: 1024 },
                413,
                "body-too-large",
                None,
            ),
            (Refusal::Unauthenticated, 401, "unauthenticated", None),
            (
                Refusal::InvalidBody {
                    code: "json-duplicate-member".into(),
                    message: "m".into(),
                },
                400,
                "invalid-request-body",
                None,
            ),
        ];
        for (refusal, status, name, retry_after) in rows {
            let answer = refusal.to_answer();
            assert_eq!(answer.status, status, "{refusal:?}");
            assert_eq!(header(&answer, "content-type"), Some(PROBLEM_JSON));
            assert_eq!(header(&answer, "retry-after"), retry_after, "{refusal:?}");
            let json = body_json(&answer);
            assert_eq!(json["type"], format!("{PROBLEM_TYPE_BASE}{name}"));
            assert_eq!(json["status"], u64::from(status));
            assert!(json["title"].as_str().is_some_and(|t| !t.is_empty()));
        }
    }

    #[test]
    fn uncertain_answers_carry_the_log_reference() {
        let log_ref = Scope::new("t", "op")
            .unwrap()
            .record_id(&IdempotencyKey::new("secret").unwrap())
            .log_ref();
        let answer = Refusal::OutcomeUncertain { log_ref }.to_answer();
        let json = body_json(&answer);
        assert_eq!(json["log_ref"], log_ref.to_string());
        assert!(!String::from_utf8(answer.body).unwrap().contains("secret"));
    }

    #[test]
    fn an_unrecorded_outcome_is_uncertain_with_its_code_and_the_handler_status() {
        let log_ref = Scope::new("t", "op")
            .unwrap()
            .record_id(&IdempotencyKey::new("k").unwrap())
            .log_ref();
        let answer = Refusal::OutcomeNotRecorded {
            log_ref,
            original_status: 201,
        }
        .to_answer();
        let json = body_json(&answer);
        assert_eq!(answer.status, 409);
        assert_eq!(json["code"], "outcome-not-recorded");
        assert_eq!(json["log_ref"], log_ref.to_string());
        assert_eq!(json["original_status"], 201);
        assert_eq!(
            header(&answer, "retry-after"),
            None,
            "not an invitation to retry"
        );
    }

    #[test]
    fn problem_bodies_are_canonical() {
        let answer = Refusal::InvalidKey(KeyError::InvalidCharacter {
            offset: 3,
            byte: 0x0a,
        })
        .to_answer();
        let text = String::from_utf8(answer.body).unwrap();
        let names: Vec<String> = body_json(&Refusal::MissingKey.to_answer())
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert!(
            text.starts_with("{\"code\":\"key-invalid-character\",\"detail\":"),
            "{text}"
        );
    }

    #[test]
    fn a_bindings_own_problem_is_canonical_problem_json() {
        let answer = Answer::problem(502, "upstream-unavailable", "T \"q\"", "a\nb");
        assert_eq!(answer.status, 502);
        assert_eq!(header(&answer, "content-type"), Some(PROBLEM_JSON));
        assert_eq!(
            String::from_utf8(answer.body).unwrap(),
            "{\"detail\":\"a\\nb\",\"status\":502,\"title\":\"T \\\"q\\\"\",\
             \"type\":\"https://idemkit.dev/problems/upstream-unavailable\"}"
        );
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(999)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(30)), 30);
    }
}
