//! The one mapping from what an HTTP binding knows to what it sends.

use crate::prelude::*;

use super::{Answer, IDEMPOTENT_REPLAYED, Refusal};
use crate::machine::ClaimOutcome;
use crate::scope::LogRef;

/// What an HTTP binding knows when a request reaches the point of an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The claim's decision, with the record's log reference (quoted by the
    /// `outcome-uncertain` answer).
    Claim(ClaimOutcome, LogRef),
    /// A refusal before the claim (no principal, key, body) or after the
    /// handler answered (its outcome could not be recorded).
    Refused(Refusal),
}

impl From<Refusal> for Outcome {
    fn from(refusal: Refusal) -> Self {
        Outcome::Refused(refusal)
    }
}

/// What the binding does: run the handler, or send an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The claim granted an execution: the handler runs.
    Execute,
    /// Send the stored response again.
    Replay {
        /// The stored status.
        status: u16,
        /// The stored headers in their order, then `idempotent-replayed: true`.
        /// Values are raw bytes, as they were stored.
        headers: Vec<(String, Vec<u8>)>,
        /// The stored body.
        body: Vec<u8>,
    },
    /// Send a problem answer (status, `content-type`, `retry-after` where the
    /// contract has one, canonical problem body).
    Problem(Answer),
}

/// The HTTP answer to `outcome`, per the contract in this module's table.
///
/// Every binding renders its answers from here (the tower/axum middleware,
/// `idemkit proxy` through it, and the JavaScript handler through the wasm
/// package), so a client gets the same bytes from each.
///
/// ```
/// use core::time::Duration;
/// use idemkit_core::http::{Outcome, Refusal, Reply, reply};
/// use idemkit_core::machine::ClaimOutcome;
/// use idemkit_core::{IdempotencyKey, Scope};
///
/// let log_ref = Scope::new("tenant", "op")?.record_id(&IdempotencyKey::new("k")?).log_ref();
/// let in_flight = ClaimOutcome::InFlight { retry_after: Duration::from_secs(3) };
/// let Reply::Problem(answer) = reply(Outcome::Claim(in_flight, log_ref)) else { unreachable!() };
/// assert_eq!(answer.status, 409);
/// assert!(answer.headers.contains(&("retry-after".into(), "3".into())));
/// assert_eq!(reply(Refusal::MissingKey.into()), Reply::Problem(Refusal::MissingKey.to_answer()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn reply(outcome: Outcome) -> Reply {
    let refusal = match outcome {
        Outcome::Refused(refusal) => refusal,
        Outcome::Claim(claim, log_ref) => match claim {
            ClaimOutcome::Execute { .. } => return Reply::Execute,
            // The machine replays only a response whose body it still holds;
            // one without is answered ResponseExpired.
            ClaimOutcome::Replay { response } => {
                // The marker is set once, whatever the record holds.
                let mut headers = response.headers;
                headers.retain(|(name, _)| !name.eq_ignore_ascii_case(IDEMPOTENT_REPLAYED));
                headers.push((IDEMPOTENT_REPLAYED.to_owned(), b"true".to_vec()));
                return Reply::Replay {
                    status: response.status,
                    headers,
                    body: response.body.unwrap_or_default(),
                };
            }
            ClaimOutcome::ResponseExpired {
                status,
                resource_ref,
            } => Refusal::ResponseExpired {
                original_status: status,
                resource_ref,
            },
            ClaimOutcome::InFlight { retry_after } => Refusal::InProgress { retry_after },
            ClaimOutcome::Mismatch { status } => Refusal::KeyReused { status },
            ClaimOutcome::Uncertain { .. } => Refusal::OutcomeUncertain { log_ref },
        },
    };
    Reply::Problem(refusal.to_answer())
}

#[cfg(test)]
mod tests {
    use core::time::Duration;

    use super::*;
    use crate::http::{PROBLEM_JSON, PROBLEM_TYPE_BASE};
    use crate::record::{FencingToken, StoredResponse};
    use crate::{IdempotencyKey, Scope, UnixMillis};

    fn log_ref() -> LogRef {
        Scope::new("t", "op")
            .unwrap()
            .record_id(&IdempotencyKey::new("k").unwrap())
            .log_ref()
    }

    fn problem(outcome: ClaimOutcome) -> Answer {
        match reply(Outcome::Claim(outcome, log_ref())) {
            Reply::Problem(answer) => answer,
            other => panic!("expected a problem, got {other:?}"),
        }
    }

    fn header<'a>(answer: &'a Answer, name: &str) -> Option<&'a str> {
        answer
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(answer: &Answer) -> serde_json::Value {
        serde_json::from_slice(&answer.body).unwrap()
    }

    #[test]
    fn execute_runs_the_handler() {
        let outcome = ClaimOutcome::Execute {
            token: FencingToken::new(1).unwrap(),
            attempt: 1,
            lease_expires_at: UnixMillis::from_millis(0),
            steps: Vec::new(),
        };
        assert_eq!(reply(Outcome::Claim(outcome, log_ref())), Reply::Execute);
    }

    #[test]
    fn replay_is_the_stored_response_marked_replayed() {
        let response = StoredResponse {
            status: 201,
            headers: vec![
                ("content-type".into(), b"application/json".to_vec()),
                ("x-raw".into(), vec![0xff, b'a']),
                ("Idempotent-Replayed".into(), b"false".to_vec()),
            ],
            body: Some(b"{\"id\":1}".to_vec()),
            resource_ref: Some("apt_1".into()),
        };
        let got = reply(Outcome::Claim(ClaimOutcome::Replay { response }, log_ref()));
        assert_eq!(
            got,
            Reply::Replay {
                status: 201,
                headers: vec![
                    ("content-type".into(), b"application/json".to_vec()),
                    ("x-raw".into(), vec![0xff, b'a']),
                    (IDEMPOTENT_REPLAYED.into(), b"true".to_vec()),
                ],
                body: b"{\"id\":1}".to_vec(),
            }
        );
    }

    #[test]
    fn each_refusing_outcome_has_its_status_type_and_headers() {
        let rows: Vec<(ClaimOutcome, u16, &str, Option<&str>)> = vec![
            (
                ClaimOutcome::ResponseExpired {
                    status: 201,
                    resource_ref: Some("apt_1".into()),
                },
                410,
                "response-expired",
                None,
            ),
            (
                ClaimOutcome::InFlight {
                    retry_after: Duration::from_millis(2_500),
                },
                409,
                "request-in-progress",
                Some("3"),
            ),
            (
                ClaimOutcome::Mismatch { status: 422 },
                422,
                "idempotency-key-reused",
                None,
            ),
            (
                ClaimOutcome::Mismatch { status: 409 },
                409,
                "idempotency-key-reused",
                None,
            ),
            (
                ClaimOutcome::Uncertain {
                    since: UnixMillis::from_millis(5),
                },
                409,
                "outcome-uncertain",
                None,
            ),
        ];
        for (outcome, status, name, retry_after) in rows {
            let answer = problem(outcome.clone());
            assert_eq!(answer.status, status, "{outcome:?}");
            assert_eq!(header(&answer, "content-type"), Some(PROBLEM_JSON));
            assert_eq!(header(&answer, "retry-after"), retry_after, "{outcome:?}");
            assert_eq!(json(&answer)["type"], format!("{PROBLEM_TYPE_BASE}{name}"));
        }
    }

    #[test]
    fn claim_outcomes_answer_as_their_refusals() {
        let expired = problem(ClaimOutcome::ResponseExpired {
            status: 201,
            resource_ref: Some("apt_1".into()),
        });
        assert_eq!(
            expired,
            Refusal::ResponseExpired {
                original_status: 201,
                resource_ref: Some("apt_1".into()),
            }
            .to_answer()
        );
        assert_eq!(json(&expired)["resource_ref"], "apt_1");
        let uncertain = problem(ClaimOutcome::Uncertain {
            since: UnixMillis::from_millis(5),
        });
        assert_eq!(
            uncertain,
            Refusal::OutcomeUncertain { log_ref: log_ref() }.to_answer()
        );
        assert_eq!(json(&uncertain)["log_ref"], log_ref().to_string());
    }

    #[test]
    fn too_many_waiters_is_a_503_with_retry_after() {
        let answer = Refusal::TooManyWaiters {
            retry_after: Duration::from_millis(1_200),
        }
        .to_answer();
        assert_eq!(answer.status, 503);
        assert_eq!(header(&answer, "retry-after"), Some("2"));
        assert_eq!(
            json(&answer)["type"],
            format!("{PROBLEM_TYPE_BASE}too-many-waiters")
        );
    }

    #[test]
    fn every_refusal_is_its_own_answer() {
        let refusals = [
            Refusal::Unauthenticated,
            Refusal::MissingKey,
            Refusal::InvalidKey(crate::KeyError::Empty),
            Refusal::BodyTooLarge { limit: 64 },
            Refusal::InvalidBody {
                code: "json-duplicate-member".into(),
                message: "m".into(),
            },
            Refusal::StoreUnavailable {
                retry_after: Duration::from_secs(1),
            },
            Refusal::TooManyWaiters {
                retry_after: Duration::from_secs(2),
            },
            Refusal::OutcomeNotRecorded {
                log_ref: log_ref(),
                original_status: 201,
            },
        ];
        for refusal in refusals {
            assert_eq!(
                reply(refusal.clone().into()),
                Reply::Problem(refusal.to_answer()),
                "{refusal:?}"
            );
        }
    }
}
