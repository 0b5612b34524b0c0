//! A circuit breaker with time as a parameter.
//!
//! `Closed` counts consecutive failures; at the threshold it opens. `Open` refuses
//! every call until its cool-down ends, then becomes `HalfOpen`, which lets exactly
//! one probe through at a time: a success closes the breaker, a failure opens it
//! again for another cool-down.

use core::fmt;
use core::time::Duration;

use crate::client::AttemptResult;
use crate::time::UnixMillis;

/// When the breaker opens and for how long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker (at least 1).
    pub failure_threshold: u32,
    /// How long an open breaker refuses calls before it lets a probe through.
    pub open_for: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failure_threshold: 5,
            open_for: Duration::from_secs(30),
        }
    }
}

/// The breaker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls pass; this many consecutive failures so far.
    Closed {
        /// Consecutive failures since the last success.
        failures: u32,
    },
    /// Calls are refused until `until`.
    Open {
        /// When a probe may be tried.
        until: UnixMillis,
    },
    /// One probe may pass; `probing` is true while it is out.
    HalfOpen {
        /// A probe has been let through and not reported yet.
        probing: bool,
    },
}

/// The breaker refused a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerOpen {
    /// How long until a call may be tried again (zero when a probe is already out).
    pub retry_after: Duration,
}

impl fmt::Display for BreakerOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "circuit breaker is open; retry in {} ms",
            self.retry_after.as_millis()
        )
    }
}

impl core::error::Error for BreakerOpen {}

/// A circuit breaker. Ask [`CircuitBreaker::allow`] before each call and report
/// its result with [`CircuitBreaker::on_success`] or [`CircuitBreaker::on_failure`].
///
/// ```
/// use core::time::Duration;
/// use idemkit_core::UnixMillis;
/// use idemkit_core::client::{BreakerConfig, CircuitBreaker};
///
/// let mut breaker = CircuitBreaker::new(BreakerConfig { failure_threshold: 2, open_for: Duration::from_secs(10) });
/// let t0 = UnixMillis::from_millis(0);
/// breaker.allow(t0)?;
/// breaker.on_failure(t0);
/// breaker.allow(t0)?;
/// breaker.on_failure(t0);
/// assert!(breaker.allow(t0).is_err()); // open for 10 s
/// let later = UnixMillis::from_millis(10_000);
/// breaker.allow(later)?; // the one probe
/// breaker.on_success(later);
/// breaker.allow(later)?; // closed again
/// # Ok::<(), idemkit_core::client::BreakerOpen>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CircuitBreaker {
    config: BreakerConfig,
    state: BreakerState,
}

impl CircuitBreaker {
    /// A closed breaker.
    #[must_use]
    pub fn new(config: BreakerConfig) -> Self {
        CircuitBreaker {
            config,
            state: BreakerState::Closed { failures: 0 },
        }
    }

    /// A breaker in `state`: one restored from where a caller kept it between
    /// processes (a journal), under `config`.
    #[must_use]
    pub fn from_state(config: BreakerConfig, state: BreakerState) -> Self {
        CircuitBreaker { config, state }
    }

    /// The breaker's configuration.
    #[must_use]
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// The current state (an open breaker whose cool-down has ended still reads
    /// `Open` until the next [`CircuitBreaker::allow`]).
    #[must_use]
    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// May a call be made at `now`? In half-open state this lets one probe through
    /// and refuses others until the probe is reported.
    pub fn allow(&mut self, now: UnixMillis) -> Result<(), BreakerOpen> {
        match self.state {
            BreakerState::Closed { .. } => Ok(()),
            BreakerState::Open { until } if now < until => Err(BreakerOpen {
                retry_after: now.until(until),
            }),
            BreakerState::Open { .. } | BreakerState::HalfOpen { probing: false } => {
                self.state = BreakerState::HalfOpen { probing: true };
                Ok(())
            }
            BreakerState::HalfOpen { probing: true } => Err(BreakerOpen {
                retry_after: Duration::ZERO,
            }),
        }
    }

    /// Like [`CircuitBreaker::allow`], for a breaker shared by callers that may
    /// vanish (processes sharing a journal, actions sharing a runtime): a probe let
    /// through leaves the breaker `Open` for `probe_lease` (give at least the
    /// call's timeout) instead of `HalfOpen`. Others are refused until the probe
    /// is reported; if it never is (its caller died), the next call after the lease
    /// is the next probe, so a lost probe never keeps the breaker shut for good.
    pub fn allow_leasing_probe(
        &mut self,
        now: UnixMillis,
        probe_lease: Duration,
    ) -> Result<(), BreakerOpen> {
        self.allow(now)?;
        if self.state == (BreakerState::HalfOpen { probing: true }) {
            self.state = BreakerState::Open {
                until: now.saturating_add(probe_lease),
            };
        }
        Ok(())
    }

    /// The call that was allowed succeeded.
    pub fn on_success(&mut self, _now: UnixMillis) {
        self.state = BreakerState::Closed { failures: 0 };
    }

    /// The call that was allowed failed (a failure of the dependency: a connect
    /// error, a timeout, a 5xx — not a definitive 4xx, which proves it healthy).
    pub fn on_failure(&mut self, now: UnixMillis) {
        self.state = match self.state {
            BreakerState::Closed { failures } => {
                let failures = failures.saturating_add(1);
                if failures >= self.config.failure_threshold.max(1) {
                    BreakerState::Open {
                        until: now.saturating_add(self.config.open_for),
                    }
                } else {
                    BreakerState::Closed { failures }
                }
            }
            BreakerState::HalfOpen { .. } | BreakerState::Open { .. } => BreakerState::Open {
                until: now.saturating_add(self.config.open_for),
            },
        };
    }

    /// Reports the allowed call's `result`: [`CircuitBreaker::on_failure`] when
    /// [`is_dependency_failure`] says the dependency failed, otherwise
    /// [`CircuitBreaker::on_success`] (any other answer shows it is up).
    pub fn record(&mut self, result: &AttemptResult, now: UnixMillis) {
        if is_dependency_failure(result) {
            self.on_failure(now);
        } else {
            self.on_success(now);
        }
    }
}

/// Does this attempt count against the dependency's breaker? A connect error, a
/// timeout, a 5xx, 408 and 429 (overloaded) do; any other answer — a 2xx, a
/// definitive 4xx, `409 request-in-progress`, `409 outcome-uncertain` — came from
/// a dependency that is up, and closes the breaker's failure count.
#[must_use]
pub fn is_dependency_failure(result: &AttemptResult) -> bool {
    match result {
        AttemptResult::ConnectError | AttemptResult::Timeout => true,
        AttemptResult::Response { status, .. } => matches!(status, 408 | 429 | 500..=599),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Event {
        Tick(u64),
        Call { succeeds: bool },
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (0u64..20_000).prop_map(Event::Tick),
            any::<bool>().prop_map(|succeeds| Event::Call { succeeds }),
        ]
    }

    fn response(status: u16) -> AttemptResult {
        AttemptResult::Response {
            status,
            problem_type: None,
            retry_after: None,
            original_status: None,
        }
    }

    #[test]
    fn only_failures_of_the_dependency_count_against_it() {
        for failing in [
            AttemptResult::ConnectError,
            AttemptResult::Timeout,
            response(408),
            response(429),
            response(500),
            response(503),
            response(599),
        ] {
            assert!(is_dependency_failure(&failing), "{failing:?}");
        }
        for healthy in [200, 201, 302, 400, 404, 409, 410, 422, 425] {
            assert!(!is_dependency_failure(&response(healthy)), "{healthy}");
        }
    }

    #[test]
    fn a_restored_breaker_continues_where_it_was_kept() {
        let config = BreakerConfig {
            failure_threshold: 2,
            open_for: Duration::from_millis(100),
        };
        let t0 = UnixMillis::from_millis(1_000);
        let mut first = CircuitBreaker::new(config.clone());
        first.record(&AttemptResult::Timeout, t0);
        let mut second = CircuitBreaker::from_state(config, first.state());
        second.record(&response(503), t0);
        assert_eq!(
            second.state(),
            BreakerState::Open {
                until: UnixMillis::from_millis(1_100)
            }
        );
        assert!(second.allow(UnixMillis::from_millis(1_099)).is_err());
        assert!(second.allow(UnixMillis::from_millis(1_100)).is_ok());
        second.record(&response(422), UnixMillis::from_millis(1_100));
        assert_eq!(second.state(), BreakerState::Closed { failures: 0 });
    }

    #[test]
    fn a_leased_probe_keeps_others_out_until_it_reports_or_its_lease_ends() {
        let config = BreakerConfig {
            failure_threshold: 1,
            open_for: Duration::from_millis(100),
        };
        let lease = Duration::from_millis(1_000);
        let mut breaker = CircuitBreaker::new(config);
        breaker.record(&AttemptResult::ConnectError, UnixMillis::from_millis(0));
        let at = UnixMillis::from_millis;
        assert!(breaker.allow_leasing_probe(at(99), lease).is_err());
        assert_eq!(breaker.allow_leasing_probe(at(100), lease), Ok(()));
        assert_eq!(breaker.state(), BreakerState::Open { until: at(1_100) });
        assert_eq!(
            breaker.allow_leasing_probe(at(600), lease),
            Err(BreakerOpen {
                retry_after: Duration::from_millis(500)
            })
        );
        // The probe's caller vanished: after the lease, another probe goes out.
        assert_eq!(breaker.allow_leasing_probe(at(1_100), lease), Ok(()));
        breaker.record(&response(201), at(1_200));
        assert_eq!(breaker.state(), BreakerState::Closed { failures: 0 });
        assert_eq!(breaker.allow_leasing_probe(at(1_200), lease), Ok(()));
        assert_eq!(breaker.state(), BreakerState::Closed { failures: 0 });
    }

    proptest! {
        /// The breaker against a plain model: failures counted since the last
        /// success, an open-until instant, and whether a probe is out.
        #[test]
        fn breaker_matches_its_model(
            threshold in 1u32..6,
            open_ms in 1u64..30_000,
            events in proptest::collection::vec(event(), 1..200),
        ) {
            let mut breaker = CircuitBreaker::new(BreakerConfig {
                failure_threshold: threshold,
                open_for: Duration::from_millis(open_ms),
            });
            let mut now = 0u64;
            let mut failures = 0u32;
            let mut open_until: Option<u64> = None;
            for event in events {
                match event {
                    Event::Tick(ms) => now += ms,
                    Event::Call { succeeds } => {
                        let t = UnixMillis::from_millis(now);
                        let model_allows = match open_until {
                            Some(until) => now >= until,
                            None => true,
                        };
                        let allowed = breaker.allow(t);
                        prop_assert_eq!(allowed.is_ok(), model_allows, "at {}ms state {:?}", now, breaker.state());
                        if let Err(refusal) = allowed {
                            prop_assert_eq!(refusal.retry_after, Duration::from_millis(open_until.unwrap_or(now) - now));
                            continue;
                        }
                        // A second caller while the probe is out is refused.
                        if open_until.is_some() {
                            prop_assert!(breaker.allow(t).is_err());
                        }
                        if succeeds {
                            breaker.on_success(t);
                            failures = 0;
                            open_until = None;
                        } else {
                            breaker.on_failure(t);
                            failures += 1;
                            if open_until.is_some() || failures >= threshold {
                                open_until = Some(now + open_ms);
                                failures = 0;
                            }
                        }
                    }
                }
            }
        }
    }
}
