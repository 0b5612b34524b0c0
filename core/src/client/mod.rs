//! The client side: what an agent tool runtime or an HTTP client needs to retry a
//! state-changing call safely (docs/architecture.md, "The client side").
//!
//! - [`RetryPolicy`] decides, after each attempt, whether to retry and how long to
//!   wait: bounded attempts, exponential backoff with full jitter from a random
//!   number the caller supplies, a cap, and `Retry-After` honoured.
//! - [`CircuitBreaker`] stops hammering a dependency that keeps failing
//!   (closed → open → half-open), with time as a parameter.
//! - [`ActionStatus`] is the outcome of one logical action: `pending`, `confirmed`,
//!   `rejected` or `unknown`. An uncertain outcome is never reported as confirmed.
//!
//! Like the rest of the core, nothing here sleeps, reads a clock or draws random
//! numbers: the caller passes `now` and a random `u64`, and performs the wait.
//!
//! ```
//! use core::time::Duration;
//! use idemkit_core::client::{ActionStatus, AttemptResult, RetryDecision, RetryPolicy};
//!
//! let policy = RetryPolicy::default();
//! // The first attempt timed out: the request may or may not have arrived, so retry
//! // with the same idempotency key after a jittered delay.
//! match policy.decide(1, &AttemptResult::Timeout, 0x9e37_79b9_7f4a_7c15) {
//!     RetryDecision::RetryAfter(delay) => assert!(delay <= policy.base_delay),
//!     RetryDecision::Stop(status) => unreachable!("{status:?}"),
//! }
//! // A 422 (the key was used for another payload) is definitive: never retried.
//! let rejected = AttemptResult::Response {
//!     status: 422,
//!     problem_type: None,
//!     retry_after: None,
//!     original_status: None,
//! };
//! assert_eq!(policy.decide(1, &rejected, 7), RetryDecision::Stop(ActionStatus::Rejected));
//! ```

mod breaker;
mod retry;

pub use breaker::{
    BreakerConfig, BreakerOpen, BreakerState, CircuitBreaker, is_dependency_failure,
};
pub use retry::{
    ActionStatus, AttemptClass, AttemptResult, PROBLEM_KEY_REUSED, PROBLEM_OUTCOME_UNCERTAIN,
    PROBLEM_REQUEST_IN_PROGRESS, PROBLEM_RESPONSE_EXPIRED, RetryDecision, RetryPolicy,
};
