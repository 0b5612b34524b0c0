//! A circuit breaker with time as a parameter.
//!
//! `Closed` counts consecutive failures; at the threshold it opens. `Open` refuses
//! every call until its cool-down ends, then becomes `HalfOpen`, which lets exactly
//! one probe through at a time: a success closes the breaker, a failure opens it
//! again for another cool-down.

use core::fmt;
use core::time::Duration;

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

impl std::error::Error for BreakerOpen {}

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
