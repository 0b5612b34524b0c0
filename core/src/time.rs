//! Time as a value: core never reads a clock.
//!
//! Every decision takes `now: UnixMillis` as a parameter, so tests drive the state
//! machine with virtual time and the same decision is reproducible on every backend.

use core::fmt;
use core::time::Duration;

/// Milliseconds since the Unix epoch (UTC), as given by the caller.
///
/// Arithmetic saturates: a lease of `Duration::MAX` expires at [`UnixMillis::MAX`],
/// never wraps around into the past.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct UnixMillis(u64);

impl UnixMillis {
    /// The epoch itself.
    pub const ZERO: UnixMillis = UnixMillis(0);
    /// The latest representable instant; used for "never".
    pub const MAX: UnixMillis = UnixMillis(u64::MAX);

    /// An instant from milliseconds since the epoch.
    #[must_use]
    pub const fn from_millis(millis: u64) -> Self {
        UnixMillis(millis)
    }

    /// Milliseconds since the epoch.
    #[must_use]
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// `self + duration`, saturating at [`UnixMillis::MAX`].
    #[must_use]
    pub fn saturating_add(self, duration: Duration) -> Self {
        let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        UnixMillis(self.0.saturating_add(millis))
    }

    /// How long from `self` until `later`; zero when `later` is not after `self`.
    #[must_use]
    pub fn until(self, later: UnixMillis) -> Duration {
        Duration::from_millis(later.0.saturating_sub(self.0))
    }
}

impl fmt::Display for UnixMillis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_saturates_instead_of_wrapping() {
        let t = UnixMillis::from_millis(u64::MAX - 5);
        assert_eq!(t.saturating_add(Duration::from_secs(1)), UnixMillis::MAX);
        assert_eq!(t.saturating_add(Duration::MAX), UnixMillis::MAX);
    }

    #[test]
    fn until_is_zero_for_the_past() {
        let t = UnixMillis::from_millis(1_000);
        assert_eq!(t.until(UnixMillis::from_millis(400)), Duration::ZERO);
        assert_eq!(
            t.until(UnixMillis::from_millis(1_400)),
            Duration::from_millis(400)
        );
    }
}
