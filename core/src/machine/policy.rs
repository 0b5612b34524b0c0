//! What an operation promises: lease, retention clocks, effect kind, and which
//! outcomes are stored.

use core::time::Duration;

use crate::record::{EffectKind, Step};

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
    /// Store 1xx, 2xx, 3xx and 4xx other than 408/409/425/429. Those four
    /// ("retry later") and 5xx (and any status outside 100–599) follow the effect
    /// kind: Local releases; External becomes Unknown unless the attempt shows that
    /// nothing was dispatched ([`Dispatch::Nothing`]), then it releases.
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

/// What a finished attempt knows about its downstream (External) dispatch; the
/// evidence [`classify_attempt`] weighs for a retry-later status or a 5xx.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Dispatch {
    /// Nothing is known: an External effect may have been sent (the default, and
    /// the only safe assumption without evidence).
    #[default]
    Unknown,
    /// Nothing was dispatched, so a retry may execute again. Only two things are
    /// evidence of it: the handler said so explicitly (`nothing_dispatched()` on
    /// the Rust `Execution`, `nothingDispatched()` in JavaScript), or the route
    /// declared that it dispatches only through steps and the record holds no
    /// step ([`Dispatch::from_steps`]).
    Nothing,
}

impl Dispatch {
    /// The evidence of a record's steps.
    ///
    /// `dispatches_only_through_steps` is the route's declaration that every
    /// downstream call is preceded by `begin_step` (which persists the step before
    /// the call). Only under that declaration does an empty step list prove that
    /// nothing was dispatched; a route that does not use steps at all has an empty
    /// list too, and proves nothing. Any step, started or done, by this attempt or
    /// an earlier one, means something may have been dispatched.
    ///
    /// ```
    /// use idemkit_core::machine::Dispatch;
    ///
    /// assert_eq!(Dispatch::from_steps(true, &[]), Dispatch::Nothing);
    /// assert_eq!(Dispatch::from_steps(false, &[]), Dispatch::Unknown);
    /// ```
    #[must_use]
    pub fn from_steps(dispatches_only_through_steps: bool, steps: &[Step]) -> Dispatch {
        if dispatches_only_through_steps && steps.is_empty() {
            Dispatch::Nothing
        } else {
            Dispatch::Unknown
        }
    }

    /// `Nothing` when either piece of evidence says so.
    #[must_use]
    pub fn or(self, other: Dispatch) -> Dispatch {
        if self == Dispatch::Nothing || other == Dispatch::Nothing {
            Dispatch::Nothing
        } else {
            Dispatch::Unknown
        }
    }
}

/// How a finished attempt with HTTP `status` is recorded under `policy`, with no
/// evidence about its dispatch ([`Dispatch::Unknown`]); see [`classify_attempt`].
///
/// ```
/// use idemkit_core::machine::{classify, Disposition, Policy, StorePolicy};
/// use idemkit_core::record::EffectKind;
///
/// let external = Policy::default();
/// assert_eq!(classify(201, &external), Disposition::Store);
/// assert_eq!(classify(303, &external), Disposition::Store);
/// assert_eq!(classify(404, &external), Disposition::Store);
/// assert_eq!(classify(429, &external), Disposition::Unknown);
/// assert_eq!(classify(502, &external), Disposition::Unknown);
/// let local = external.with_effect(EffectKind::Local);
/// assert_eq!(classify(429, &local), Disposition::Release);
/// assert_eq!(classify(502, &local), Disposition::Release);
/// let stripe = external.with_store(StorePolicy::StoreEverything);
/// assert_eq!(classify(502, &stripe), Disposition::Store);
/// ```
pub fn classify(status: u16, policy: &Policy) -> Disposition {
    classify_attempt(status, policy, Dispatch::Unknown)
}

/// How a finished attempt with HTTP `status` is recorded under `policy`, given
/// what it knows about its dispatch.
///
/// Under [`StorePolicy::Definitive`]: 1xx, 2xx, 3xx (post/redirect/get) and 4xx
/// other than 408/409/425/429 are definitive answers, stored and replayed. The
/// four "retry later" statuses and 5xx (and any status outside 100–599) are not:
/// on a Local operation they release (the effect commits with the outcome, so it
/// did not happen); on an External one they become Unknown, because a timeout
/// layer's 408 or a 429 from a downstream can be answered after the downstream
/// call was sent. Only [`Dispatch::Nothing`] lets an External attempt release.
/// Under [`StorePolicy::StoreEverything`] every status is stored.
///
/// ```
/// use idemkit_core::machine::{classify_attempt, Dispatch, Disposition, Policy};
///
/// let external = Policy::default();
/// assert_eq!(classify_attempt(408, &external, Dispatch::Unknown), Disposition::Unknown);
/// assert_eq!(classify_attempt(408, &external, Dispatch::Nothing), Disposition::Release);
/// assert_eq!(classify_attempt(201, &external, Dispatch::Nothing), Disposition::Store);
/// ```
pub fn classify_attempt(status: u16, policy: &Policy, dispatch: Dispatch) -> Disposition {
    match policy.store {
        StorePolicy::StoreEverything => Disposition::Store,
        StorePolicy::Definitive => match status {
            // Retry later: the attempt may still have had its effect.
            408 | 409 | 425 | 429 => by_effect(policy.effect, dispatch),
            100..=499 => Disposition::Store,
            _ => by_effect(policy.effect, dispatch),
        },
    }
}

fn by_effect(effect: EffectKind, dispatch: Dispatch) -> Disposition {
    match (effect, dispatch) {
        (EffectKind::Local, _) | (EffectKind::External, Dispatch::Nothing) => Disposition::Release,
        (EffectKind::External, Dispatch::Unknown) => Disposition::Unknown,
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
            // 1xx, 2xx, 3xx and 4xx other than the four "retry later" ones.
            let definitive =
                matches!(status, 100..=499) && !matches!(status, 408 | 409 | 425 | 429);
            let (want_local, want_external, want_external_nothing) = if definitive {
                (Disposition::Store, Disposition::Store, Disposition::Store)
            } else {
                // Retry later and 5xx (and nonsense statuses) follow the effect
                // kind; only evidence of no dispatch releases an External attempt.
                (
                    Disposition::Release,
                    Disposition::Unknown,
                    Disposition::Release,
                )
            };
            assert_eq!(classify(status, &local), want_local, "{status} local");
            for dispatch in [Dispatch::Unknown, Dispatch::Nothing] {
                assert_eq!(
                    classify_attempt(status, &local, dispatch),
                    want_local,
                    "{status} local {dispatch:?}"
                );
                assert_eq!(
                    classify_attempt(status, &everything, dispatch),
                    Disposition::Store
                );
            }
            assert_eq!(
                classify(status, &external),
                want_external,
                "{status} external"
            );
            assert_eq!(
                classify_attempt(status, &external, Dispatch::Unknown),
                want_external,
                "{status} external, dispatch unknown"
            );
            assert_eq!(
                classify_attempt(status, &external, Dispatch::Nothing),
                want_external_nothing,
                "{status} external, nothing dispatched"
            );
            assert_eq!(classify(status, &everything), Disposition::Store);
        }
    }

    #[test]
    fn steps_are_evidence_only_on_a_route_that_dispatches_through_them() {
        use crate::UnixMillis;
        use crate::record::StepState;
        let step = Step {
            name: "charge".into(),
            state: StepState::Started,
            provider_key: "pk".into(),
            provider_ref: None,
            started_at: UnixMillis::ZERO,
            done_at: None,
        };
        assert_eq!(Dispatch::from_steps(true, &[]), Dispatch::Nothing);
        assert_eq!(Dispatch::from_steps(false, &[]), Dispatch::Unknown);
        assert_eq!(
            Dispatch::from_steps(true, core::slice::from_ref(&step)),
            Dispatch::Unknown
        );
        let done = Step {
            state: StepState::Done,
            done_at: Some(UnixMillis::ZERO),
            ..step
        };
        assert_eq!(Dispatch::from_steps(true, &[done]), Dispatch::Unknown);
        assert_eq!(Dispatch::Unknown.or(Dispatch::Nothing), Dispatch::Nothing);
        assert_eq!(Dispatch::Unknown.or(Dispatch::Unknown), Dispatch::Unknown);
    }
}
