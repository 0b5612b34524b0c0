//! What an operation promises: lease, retention clocks, effect kind, and which
//! outcomes are stored.

use core::time::Duration;

use crate::record::EffectKind;

/// The status answered when a key is reused with a different fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MismatchStatus {
    /// `422 Unprocessable Content` (the default, as the IETF draft suggests).
    UnprocessableEntity,
    /// `409 Conflict`.
    Conflict,
}

impl MismatchStatus {
    /// The HTTP status code.
    #[must_use]
    pub const fn status(self) -> u16 {
        match self {
            MismatchStatus::UnprocessableEntity => 422,
            MismatchStatus::Conflict => 409,
        }
    }
}

/// Which responses become a stored (replayed) outcome; see [`classify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StorePolicy {
    /// Store 2xx and 4xx other than 408/409/425/429; those four release; 5xx
    /// (and any other status) follows the effect kind: Local releases, External
    /// becomes Unknown.
    Definitive,
    /// Store any response once execution began (Stripe v1 style).
    StoreEverything,
}

/// How a finished attempt's status is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub enum Disposition {
    /// Call [`complete`](super::complete): retries replay this response.
    Store,
    /// Call [`release`](super::release): the attempt had no effect, a retry executes.
    Release,
    /// Call [`mark_unknown`](super::mark_unknown): the outcome is ambiguous.
    Unknown,
}

/// The rules of one operation (one endpoint or tool).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Policy {
    /// How long a claim holds the right to execute before it must be renewed.
    pub lease: Duration,
    /// How long after completion the full response is replayed.
    pub replay_window: Duration,
    /// How long after completion or release the compact record is kept; never
    /// shorter in effect than the replay window.
    pub record_window: Duration,
    /// The effect kind of records this policy creates.
    pub effect: EffectKind,
    /// The status answered for a reused key with a different fingerprint.
    pub mismatch: MismatchStatus,
    /// Which outcomes are stored.
    pub store: StorePolicy,
}

impl Default for Policy {
    /// Lease 30 s, replay 24 h, record 7 days, External, 422, Definitive.
    fn default() -> Self {
        Policy {
            lease: Duration::from_secs(30),
            replay_window: Duration::from_secs(24 * 60 * 60),
            record_window: Duration::from_secs(7 * 24 * 60 * 60),
            effect: EffectKind::External,
            mismatch: MismatchStatus::UnprocessableEntity,
            store: StorePolicy::Definitive,
        }
    }
}

impl Policy {
    /// With another lease duration.
    #[must_use]
    pub const fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// With another replay window.
    #[must_use]
    pub const fn with_replay_window(mut self, window: Duration) -> Self {
        self.replay_window = window;
        self
    }

    /// With another record window.
    #[must_use]
    pub const fn with_record_window(mut self, window: Duration) -> Self {
        self.record_window = window;
        self
    }

    /// With another effect kind.
    #[must_use]
    pub const fn with_effect(mut self, effect: EffectKind) -> Self {
        self.effect = effect;
        self
    }

    /// With another mismatch status.
    #[must_use]
    pub const fn with_mismatch(mut self, mismatch: MismatchStatus) -> Self {
        self.mismatch = mismatch;
        self
    }

    /// With another store policy.
    #[must_use]
    pub const fn with_store(mut self, store: StorePolicy) -> Self {
        self.store = store;
        self
    }
}

/// How a finished attempt with HTTP `status` is recorded under `policy`.
///
/// ```
/// use idemkit_core::machine::{classify, Disposition, Policy, StorePolicy};
/// use idemkit_core::record::EffectKind;
///
/// let external = Policy::default();
/// assert_eq!(classify(201, &external), Disposition::Store);
/// assert_eq!(classify(404, &external), Disposition::Store);
/// assert_eq!(classify(429, &external), Disposition::Release);
/// assert_eq!(classify(502, &external), Disposition::Unknown);
/// let local = external.with_effect(EffectKind::Local);
/// assert_eq!(classify(502, &local), Disposition::Release);
/// let stripe = external.with_store(StorePolicy::StoreEverything);
/// assert_eq!(classify(502, &stripe), Disposition::Store);
/// ```
pub fn classify(status: u16, policy: &Policy) -> Disposition {
    match policy.store {
        StorePolicy::StoreEverything => Disposition::Store,
        StorePolicy::Definitive => match status {
            // Retryable client errors: the server refused before doing anything.
            408 | 409 | 425 | 429 => Disposition::Release,
            200..=299 | 400..=499 => Disposition::Store,
            _ => match policy.effect {
                EffectKind::Local => Disposition::Release,
                EffectKind::External => Disposition::Unknown,
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy_matches_the_design() {
        let p = Policy::default();
        assert_eq!(p.lease, Duration::from_secs(30));
        assert_eq!(p.replay_window, Duration::from_secs(86_400));
        assert_eq!(p.record_window, Duration::from_secs(604_800));
        assert_eq!(p.effect, EffectKind::External);
        assert_eq!(p.mismatch.status(), 422);
        assert_eq!(p.store, StorePolicy::Definitive);
        let p = p.with_mismatch(MismatchStatus::Conflict);
        assert_eq!(p.mismatch.status(), 409);
    }

    #[test]
    fn classify_covers_every_status() {
        let external = Policy::default();
        let local = external.with_effect(EffectKind::Local);
        let everything = external.with_store(StorePolicy::StoreEverything);
        for status in 0..=u16::MAX {
            let definitive =
                matches!(status, 200..=299 | 400..=499) && !matches!(status, 408 | 409 | 425 | 429);
            let retryable = matches!(status, 408 | 409 | 425 | 429);
            let (want_local, want_external) = if definitive {
                (Disposition::Store, Disposition::Store)
            } else if retryable {
                (Disposition::Release, Disposition::Release)
            } else {
                (Disposition::Release, Disposition::Unknown)
            };
            assert_eq!(classify(status, &local), want_local, "{status} local");
            assert_eq!(
                classify(status, &external),
                want_external,
                "{status} external"
            );
            assert_eq!(classify(status, &everything), Disposition::Store);
        }
    }
}
