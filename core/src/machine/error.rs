//! Why a transition was refused.

use crate::prelude::*;

use core::fmt;

use crate::record::{FencingToken, StateName};

/// A worker or operator transition was refused; the record is unchanged and the
/// store writes nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransitionError {
    /// The presented fencing token is not the record's current one: the lease
    /// was taken over, recovered, or never granted. The worker must stop; it can
    /// never overwrite the current owner's outcome.
    StaleToken {
        /// The token the caller presented.
        presented: FencingToken,
        /// The record's last granted token.
        current: FencingToken,
    },
    /// The token is current but the record is not in a state this transition
    /// applies to (for example completing a record that was already completed,
    /// or resolving a record whose lease is still live).
    WrongState {
        /// The state the transition needs.
        expected: StateName,
        /// The state the record is in.
        found: StateName,
    },
    /// `complete_step` named a step that was never begun.
    UnknownStep {
        /// The step's name.
        name: String,
    },
    /// `complete_step` reported a provider reference different from the one
    /// already recorded for that done step.
    StepConflict {
        /// The step's name.
        name: String,
    },
    /// The record's fencing-token counter is exhausted; no new lease can be
    /// granted (only reachable through a corrupted or hostile record).
    TokensExhausted {
        /// The record's last token.
        current: FencingToken,
    },
    /// A worker or operator operation on a key that has no record (never
    /// claimed, or collected by GC).
    NotFound,
}

impl fmt::Display for TransitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransitionError::StaleToken { presented, current } => write!(
                f,
                "stale fencing token {presented}: the record's current token is {current}"
            ),
            TransitionError::WrongState { expected, found } => {
                write!(f, "record is {found}, expected {expected}")
            }
            TransitionError::UnknownStep { name } => {
                write!(f, "step {name:?} was never begun")
            }
            TransitionError::StepConflict { name } => write!(
                f,
                "step {name:?} is already done with a different provider reference"
            ),
            TransitionError::TokensExhausted { current } => write!(
                f,
                "fencing tokens exhausted at {current}: no new lease can be granted"
            ),
            TransitionError::NotFound => write!(f, "no record under this key"),
        }
    }
}

impl core::error::Error for TransitionError {}
