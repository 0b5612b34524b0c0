//! Bounded retries with exponential backoff, full jitter and `Retry-After`.

use crate::prelude::*;

use core::fmt;
use core::time::Duration;

/// The problem `type` idemkit servers send while the first attempt still runs.
pub const PROBLEM_REQUEST_IN_PROGRESS: &str = "request-in-progress";
/// The problem `type` idemkit servers send when the outcome is unknown.
pub const PROBLEM_OUTCOME_UNCERTAIN: &str = "outcome-uncertain";
/// The problem `type` idemkit servers send when a key is reused for another payload.
pub const PROBLEM_KEY_REUSED: &str = "idempotency-key-reused";
/// The problem `type` (status 410) idemkit servers send when the request completed
/// but its response is past the replay window.
pub const PROBLEM_RESPONSE_EXPIRED: &str = "response-expired";

/// What one attempt at a call produced, as far as the client could tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptResult {
    /// No connection was made: the request was never sent.
    ConnectError,
    /// The request was (maybe) sent, but no response arrived in time, or the
    /// connection broke while waiting.
    Timeout,
    /// A response arrived.
    Response {
        /// The HTTP status.
        status: u16,
        /// The problem type of an `application/problem+json` body, if any. Only its
        /// last path segment is compared (`…/outcome-uncertain` or
        /// `outcome-uncertain`).
        problem_type: Option<String>,
        /// The `Retry-After` header, if the server sent one.
        retry_after: Option<Duration>,
        /// For a `response-expired` problem: the `original_status` member of its
        /// body, the status the completed request had. The action's outcome is
        /// judged by it; without it the outcome is unknown.
        original_status: Option<u16>,
    },
}

/// How an attempt is classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptClass {
    /// 2xx: the action happened.
    Success,
    /// Retrying with the same key is safe and may succeed: connect errors,
    /// timeouts, 408, 409 (other than the two below), 425, 429 and 5xx.
    Retryable,
    /// A definitive refusal: any other 4xx (400, 401, 403, 404, 422, 409
    /// `idempotency-key-reused`), or a status outside 200–599.
    Rejected,
    /// 409 `outcome-uncertain`: the server does not know whether the action
    /// happened. Retrying cannot help; a person or a reconciler must decide.
    Uncertain,
}

impl AttemptResult {
    /// Classifies this attempt.
    #[must_use]
    pub fn class(&self) -> AttemptClass {
        match self {
            AttemptResult::ConnectError | AttemptResult::Timeout => AttemptClass::Retryable,
            AttemptResult::Response {
                status,
                problem_type,
                original_status,
                ..
            } => {
                let problem = problem_type.as_deref().map(problem_name);
                if *status == 410 && problem == Some(PROBLEM_RESPONSE_EXPIRED) {
                    return match original_status {
                        Some(200..=299) => AttemptClass::Success,
                        Some(_) => AttemptClass::Rejected,
                        None => AttemptClass::Uncertain,
                    };
                }
                match *status {
                    200..=299 => AttemptClass::Success,
                    409 if problem == Some(PROBLEM_OUTCOME_UNCERTAIN) => AttemptClass::Uncertain,
                    409 if problem == Some(PROBLEM_KEY_REUSED) => AttemptClass::Rejected,
                    408 | 409 | 425 | 429 | 500..=599 => AttemptClass::Retryable,
                    _ => AttemptClass::Rejected,
                }
            }
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            AttemptResult::Response { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// The last path segment of a problem type URI.
fn problem_name(problem_type: &str) -> &str {
    problem_type.rsplit('/').next().unwrap_or(problem_type)
}

/// The outcome of one logical action, derived from its attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActionStatus {
    /// Not finished: nothing confirmed it and nothing refused it. Resuming the
    /// action later with the same key is safe.
    Pending,
    /// The server confirmed the action (2xx, or a replay of one).
    Confirmed,
    /// The server refused the action definitively (4xx).
    Rejected,
    /// Nobody knows whether the action happened. Never report this as confirmed:
    /// it must reach a person or a reconciler.
    Unknown,
}

impl ActionStatus {
    /// The lowercase name used in JSON and logs.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ActionStatus::Pending => "pending",
            ActionStatus::Confirmed => "confirmed",
            ActionStatus::Rejected => "rejected",
            ActionStatus::Unknown => "unknown",
        }
    }

    /// The status that one attempt's class implies on its own.
    #[must_use]
    pub fn from_class(class: AttemptClass) -> Self {
        match class {
            AttemptClass::Success => ActionStatus::Confirmed,
            AttemptClass::Retryable => ActionStatus::Pending,
            AttemptClass::Rejected => ActionStatus::Rejected,
            AttemptClass::Uncertain => ActionStatus::Unknown,
        }
    }

    /// The action's status from its attempts, oldest first.
    ///
    /// The last attempt that reached a definitive answer decides; with none it is
    /// `Pending`. An `Unknown` answer can only be superseded by a later definitive
    /// one (a `resolve` on the server followed by a replay), never by a retryable
    /// failure.
    #[must_use]
    pub fn from_attempts<'a>(attempts: impl IntoIterator<Item = &'a AttemptResult>) -> Self {
        attempts
            .into_iter()
            .fold(
                ActionStatus::Pending,
                |status, attempt| match ActionStatus::from_class(attempt.class()) {
                    ActionStatus::Pending => status,
                    definitive => definitive,
                },
            )
    }
}

impl fmt::Display for ActionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to do after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum RetryDecision {
    /// Wait this long, then send again with the same key.
    RetryAfter(Duration),
    /// Stop; the action ends with this status.
    Stop(ActionStatus),
}

/// Bounded retries with exponential backoff and full jitter.
///
/// The delay before attempt `n + 1` is uniform in `[0, min(cap, base · 2^(n-1))]`
/// ("full jitter"), raised to the server's `Retry-After` when that is longer.
/// A `Retry-After` beyond [`RetryPolicy::max_retry_after`] stops the action as
/// `Pending` rather than waiting that long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (at least 1).
    pub max_attempts: u32,
    /// The backoff ceiling for the first retry.
    pub base_delay: Duration,
    /// The largest backoff ceiling.
    pub max_delay: Duration,
    /// The longest `Retry-After` the client will wait for.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The backoff ceiling after attempt `attempt` (1-based): `min(max_delay,
    /// base_delay · 2^(attempt-1))`, without overflow.
    #[must_use]
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(63);
        let base = u64::try_from(self.base_delay.as_millis()).unwrap_or(u64::MAX);
        let grown = base.saturating_mul(1u64 << doublings);
        Duration::from_millis(grown).min(self.max_delay)
    }

    /// Decides what follows attempt number `attempt` (1-based) that produced
    /// `result`. `random` is any uniformly distributed `u64` (from a CSPRNG or a
    /// seeded generator in tests); it only picks the jitter.
    pub fn decide(&self, attempt: u32, result: &AttemptResult, random: u64) -> RetryDecision {
        let class = result.class();
        if class != AttemptClass::Retryable {
            return RetryDecision::Stop(ActionStatus::from_class(class));
        }
        if attempt >= self.max_attempts.max(1) {
            return RetryDecision::Stop(ActionStatus::Pending);
        }
        let ceiling = u64::try_from(self.ceiling(attempt).as_millis()).unwrap_or(u64::MAX);
        let jittered = Duration::from_millis(random % ceiling.saturating_add(1));
        match result.retry_after() {
            Some(asked) if asked > self.max_retry_after => {
                RetryDecision::Stop(ActionStatus::Pending)
            }
            Some(asked) => RetryDecision::RetryAfter(jittered.max(asked)),
            None => RetryDecision::RetryAfter(jittered),
        }
    }
}

impl AttemptResult {
    /// Whether this is 409 `request-in-progress`: the first attempt with the
    /// key still runs, so the next attempt may ask to wait for its answer
    /// (`Prefer: wait=N`).
    #[must_use]
    pub fn is_in_progress(&self) -> bool {
        matches!(
            self,
            AttemptResult::Response { status: 409, problem_type: Some(p), .. }
                if problem_name(p) == PROBLEM_REQUEST_IN_PROGRESS
        )
    }
}

impl RetryPolicy {
    /// [`decide`](Self::decide) for a client whose retry after a 409
    /// `request-in-progress` asks the server to wait for the answer
    /// (`Prefer: wait=N`): the server holds that retry until the first
    /// attempt's answer exists, so it goes after the backoff alone, not after
    /// the `Retry-After` (the running lease's remaining time, which would
    /// leave the client idle after the answer exists). Every other result is
    /// decided as by [`decide`](Self::decide).
    pub fn decide_asking_to_wait(
        &self,
        attempt: u32,
        result: &AttemptResult,
        random: u64,
    ) -> RetryDecision {
        match result {
            AttemptResult::Response {
                status,
                problem_type,
                original_status,
                ..
            } if result.is_in_progress() => self.decide(
                attempt,
                &AttemptResult::Response {
                    status: *status,
                    problem_type: problem_type.clone(),
                    retry_after: None,
                    original_status: *original_status,
                },
                random,
            ),
            _ => self.decide(attempt, result, random),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_retry_that_asks_to_wait_goes_after_the_backoff_not_the_lease() {
        let policy = RetryPolicy::default();
        let in_progress = AttemptResult::Response {
            status: 409,
            problem_type: Some("https://idemkit.dev/problems/request-in-progress".into()),
            retry_after: Some(Duration::from_secs(28)),
            original_status: None,
        };
        assert!(in_progress.is_in_progress());
        assert_eq!(
            policy.decide(1, &in_progress, 7),
            RetryDecision::RetryAfter(Duration::from_secs(28))
        );
        let RetryDecision::RetryAfter(delay) = policy.decide_asking_to_wait(1, &in_progress, 7)
        else {
            panic!("in progress is retried");
        };
        assert!(delay <= policy.ceiling(1), "{delay:?}");
        // Anything else keeps its Retry-After.
        let unavailable = AttemptResult::Response {
            status: 503,
            problem_type: None,
            retry_after: Some(Duration::from_secs(3)),
            original_status: None,
        };
        assert!(!unavailable.is_in_progress());
        assert_eq!(
            policy.decide_asking_to_wait(1, &unavailable, 7),
            policy.decide(1, &unavailable, 7)
        );
    }

    fn response(status: u16, problem: Option<&str>) -> AttemptResult {
        AttemptResult::Response {
            status,
            problem_type: problem.map(str::to_owned),
            retry_after: None,
            original_status: None,
        }
    }

    #[test]
    fn classification_follows_the_contract() {
        use AttemptClass::*;
        let cases = [
            (AttemptResult::ConnectError, Retryable),
            (AttemptResult::Timeout, Retryable),
            (response(200, None), Success),
            (response(201, None), Success),
            (response(408, None), Retryable),
            (
                response(
                    409,
                    Some("https://idemkit.dev/problems/request-in-progress"),
                ),
                Retryable,
            ),
            (response(409, None), Retryable),
            (
                response(409, Some("https://idemkit.dev/problems/outcome-uncertain")),
                Uncertain,
            ),
            (response(409, Some("outcome-uncertain")), Uncertain),
            (response(409, Some("idempotency-key-reused")), Rejected),
            (response(425, None), Retryable),
            (response(429, None), Retryable),
            (response(500, None), Retryable),
            (response(503, None), Retryable),
            (response(400, None), Rejected),
            (response(401, None), Rejected),
            (response(403, None), Rejected),
            (response(404, None), Rejected),
            (response(422, None), Rejected),
            (response(302, None), Rejected),
            (response(0, None), Rejected),
            (response(410, Some("response-expired")), Uncertain),
            (response(410, None), Rejected),
        ];
        let expired = |original| AttemptResult::Response {
            status: 410,
            problem_type: Some("https://idemkit.dev/problems/response-expired".into()),
            retry_after: None,
            original_status: Some(original),
        };
        assert_eq!(expired(201).class(), Success);
        assert_eq!(expired(400).class(), Rejected);
        for (result, class) in cases {
            assert_eq!(result.class(), class, "{result:?}");
        }
    }

    #[test]
    fn retry_after_is_honoured_and_bounded() {
        let policy = RetryPolicy::default();
        let asked = |secs| AttemptResult::Response {
            status: 429,
            problem_type: None,
            retry_after: Some(Duration::from_secs(secs)),
            original_status: None,
        };
        assert_eq!(
            policy.decide(1, &asked(3), 0),
            RetryDecision::RetryAfter(Duration::from_secs(3))
        );
        assert_eq!(
            policy.decide(1, &asked(61), 0),
            RetryDecision::Stop(ActionStatus::Pending)
        );
    }

    #[test]
    fn an_uncertain_outcome_is_never_confirmed_by_later_noise() {
        let attempts = [
            AttemptResult::Timeout,
            response(409, Some("outcome-uncertain")),
            AttemptResult::Timeout,
        ];
        assert_eq!(
            ActionStatus::from_attempts(&attempts),
            ActionStatus::Unknown
        );
        let resolved = [
            response(409, Some("outcome-uncertain")),
            response(201, None),
        ];
        assert_eq!(
            ActionStatus::from_attempts(&resolved),
            ActionStatus::Confirmed
        );
        assert_eq!(ActionStatus::from_attempts(&[]), ActionStatus::Pending);
    }

    fn any_result() -> impl Strategy<Value = AttemptResult> {
        prop_oneof![
            Just(AttemptResult::ConnectError),
            Just(AttemptResult::Timeout),
            (
                0u16..700,
                proptest::option::of(prop_oneof![
                    Just("request-in-progress".to_owned()),
                    Just("outcome-uncertain".to_owned()),
                    Just("idempotency-key-reused".to_owned()),
                    Just("response-expired".to_owned()),
                ]),
                proptest::option::of(0u64..120_000),
                proptest::option::of(100u16..600),
            )
                .prop_map(|(status, problem_type, retry_after, original_status)| {
                    AttemptResult::Response {
                        status,
                        problem_type,
                        retry_after: retry_after.map(Duration::from_millis),
                        original_status,
                    }
                }),
        ]
    }

    fn any_policy() -> impl Strategy<Value = RetryPolicy> {
        (1u32..12, 0u64..5_000, 0u64..120_000, 0u64..120_000).prop_map(
            |(max_attempts, base, cap, max_retry_after)| RetryPolicy {
                max_attempts,
                base_delay: Duration::from_millis(base),
                max_delay: Duration::from_millis(cap),
                max_retry_after: Duration::from_millis(max_retry_after),
            },
        )
    }

    proptest! {
        #[test]
        fn backoff_stays_within_its_bounds(
            policy in any_policy(),
            attempt in 1u32..200,
            result in any_result(),
            random in any::<u64>(),
        ) {
            match policy.decide(attempt, &result, random) {
                RetryDecision::RetryAfter(delay) => {
                    prop_assert_eq!(result.class(), AttemptClass::Retryable);
                    prop_assert!(attempt < policy.max_attempts);
                    let retry_after = result.retry_after().unwrap_or_default();
                    prop_assert!(retry_after <= policy.max_retry_after);
                    // Never shorter than the server asked, never longer than the larger
                    // of the ceiling and the server's request.
                    prop_assert!(delay >= retry_after);
                    prop_assert!(delay <= policy.ceiling(attempt).max(retry_after));
                    prop_assert!(policy.ceiling(attempt) <= policy.max_delay);
                }
                RetryDecision::Stop(status) => {
                    let class = result.class();
                    if class == AttemptClass::Retryable {
                        prop_assert_eq!(status, ActionStatus::Pending);
                    } else {
                        prop_assert_eq!(status, ActionStatus::from_class(class));
                    }
                }
            }
        }

        #[test]
        fn ceilings_grow_monotonically_to_the_cap(policy in any_policy(), attempt in 1u32..100) {
            prop_assert!(policy.ceiling(attempt) <= policy.ceiling(attempt + 1));
            prop_assert!(policy.ceiling(attempt + 1) <= policy.max_delay);
        }

        #[test]
        fn never_retries_definitive_answers(policy in any_policy(), attempt in 1u32..20, random in any::<u64>()) {
            for status in [400u16, 401, 403, 404, 422] {
                let result = AttemptResult::Response { status, problem_type: None, retry_after: None, original_status: None };
                prop_assert_eq!(policy.decide(attempt, &result, random), RetryDecision::Stop(ActionStatus::Rejected));
            }
            let uncertain = AttemptResult::Response {
                status: 409,
                problem_type: Some("outcome-uncertain".into()),
                retry_after: Some(Duration::from_secs(1)),
                original_status: None,
            };
            prop_assert_eq!(policy.decide(attempt, &uncertain, random), RetryDecision::Stop(ActionStatus::Unknown));
        }

        #[test]
        fn jitter_covers_the_whole_range(random in any::<u64>()) {
            // Full jitter: the delay is `random mod (ceiling + 1)`, so every value in
            // [0, ceiling] is reachable and nothing above it.
            let policy = RetryPolicy { max_attempts: 10, base_delay: Duration::from_millis(100), ..RetryPolicy::default() };
            let RetryDecision::RetryAfter(delay) = policy.decide(3, &AttemptResult::Timeout, random) else {
                return Err(TestCaseError::fail("a timeout on attempt 3 of 10 must be retried"));
            };
            prop_assert_eq!(delay, Duration::from_millis(random % 401));
        }
    }
}
