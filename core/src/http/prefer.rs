//! Waiting for a running request's answer: the `wait` preference of the
//! `Prefer` request header (RFC 7240 §4.3) and how long a binding holds a
//! retry whose key is still running.
//!
//! A retry that arrives while the first attempt runs is answered 409
//! `request-in-progress` with `Retry-After` — unless it asked to wait
//! (`Prefer: wait=N`, N seconds) or its route waits by default. Then the
//! binding holds it until the first attempt records (the retry gets the answer
//! any retry would get then), releases its claim (the retry claims and runs
//! as a new attempt would) or the wait ends (today's 409). The wait is capped
//! by the route's `max_wait`; an honoured preference is echoed as
//! `Preference-Applied: wait=N`.
//!
//! ```
//! use core::time::Duration;
//! use idemkit_core::http::prefer::{WaitRule, prefer_wait};
//!
//! // The client asks for 30 s; the route allows 10 s.
//! let rule = WaitRule { default_wait: Duration::ZERO, max_wait: Duration::from_secs(10) };
//! let wait = rule.wait_for(prefer_wait(b"respond-async, wait=30"));
//! assert_eq!(wait.duration, Duration::from_secs(10));
//! assert_eq!(wait.preference_applied().as_deref(), Some("wait=10"));
//! ```

use crate::prelude::*;

use core::time::Duration;

/// The request header that carries preferences (RFC 7240).
pub const PREFER: &str = "prefer";
/// The response header naming the preferences that were honoured.
pub const PREFERENCE_APPLIED: &str = "preference-applied";

/// The seconds of the first `wait` preference in one `Prefer` header value,
/// if it has one with a valid value.
///
/// The value is a comma-separated list of preferences, each `name[=value]`
/// with optional `;` parameters. Names compare case-insensitively; the value
/// may be quoted. Per RFC 7240 only the first `wait` counts, even when its
/// value is unusable (not a non-negative integer): such a preference is
/// ignored, never guessed at. A value too large for `u64` saturates.
#[must_use]
pub fn prefer_wait(value: &[u8]) -> Option<u64> {
    first_wait(value)?
}

/// The first `wait` preference among several `Prefer` header lines, in order.
#[must_use]
pub fn prefer_wait_in<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Option<u64> {
    values.into_iter().find_map(first_wait)?
}

/// The first `wait` preference of one header value: `None` when it names
/// none, `Some(None)` when its value is unusable (it still ends the search).
fn first_wait(value: &[u8]) -> Option<Option<u64>> {
    split_outside_quotes(value, b',').find_map(|preference| {
        let head = split_outside_quotes(preference, b';').next().unwrap_or(&[]);
        let mut halves = head.splitn(2, |&b| b == b'=');
        let (name, raw) = (halves.next().unwrap_or(&[]), halves.next());
        trim(name)
            .eq_ignore_ascii_case(b"wait")
            .then(|| raw.and_then(seconds))
    })
}

/// Whole seconds, bare or quoted; a value too large for `u64` saturates.
fn seconds(raw: &[u8]) -> Option<u64> {
    let digits = match trim(raw) {
        [b'"', inner @ .., b'"'] => inner,
        other => other,
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0u64, |n, d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

/// How long a route holds a retry whose key is running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitRule {
    /// The wait when the request states none (`wait_ms`; zero: answer 409 at once).
    pub default_wait: Duration,
    /// The longest wait, whatever the request asks (`max_wait`).
    pub max_wait: Duration,
}

impl Default for WaitRule {
    /// No wait unless asked, and a request may ask for up to
    /// [`DEFAULT_MAX_WAIT`].
    fn default() -> Self {
        WaitRule {
            default_wait: Duration::ZERO,
            max_wait: DEFAULT_MAX_WAIT,
        }
    }
}

/// The default cap on a requested wait: 10 s.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(10);

/// The default number of requests held at once on one key: past it, 503
/// `too-many-waiters`. A held request costs a connection and a few hundred
/// bytes, and no CPU until it is woken.
pub const DEFAULT_MAX_WAITERS_PER_KEY: usize = 1_024;

/// The default number of requests held at once on every key together.
pub const DEFAULT_MAX_WAITERS: usize = 10_000;

/// The wait a request gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    /// How long to hold the request while its key runs (zero: not at all).
    pub duration: Duration,
    /// Whether the request asked for it (`Prefer: wait`), so that honouring it
    /// is echoed in `Preference-Applied`.
    pub requested: bool,
}

impl Wait {
    /// The `Preference-Applied` value to send when the wait was honoured, if
    /// the request asked for one: `wait=N`, N the whole seconds granted.
    #[must_use]
    pub fn preference_applied(&self) -> Option<String> {
        self.requested
            .then(|| format!("wait={}", self.duration.as_secs()))
    }
}

impl WaitRule {
    /// The wait for a request that asked for `requested` seconds (`None`: it
    /// asked nothing, so the route's default), capped by `max_wait`.
    #[must_use]
    pub fn wait_for(&self, requested: Option<u64>) -> Wait {
        let asked = requested.map_or(self.default_wait, Duration::from_secs);
        Wait {
            duration: asked.min(self.max_wait),
            requested: requested.is_some(),
        }
    }
}

/// How long a waiter sleeps before reading the record again when nothing
/// wakes it: the first poll after [`FALLBACK_POLL_FIRST`], each later one twice
/// as long, at most [`FALLBACK_POLL_MAX`]. Used where no completion can wake a
/// waiter (a store shared with another process, a notification channel that
/// dropped, a JavaScript store with no events).
#[must_use]
pub fn fallback_poll(polls_so_far: u32) -> Duration {
    FALLBACK_POLL_FIRST
        .saturating_mul(1u32 << polls_so_far.min(8))
        .min(FALLBACK_POLL_MAX)
}

/// The first fallback poll: 50 ms.
pub const FALLBACK_POLL_FIRST: Duration = Duration::from_millis(50);
/// The longest pause between fallback polls: 1 s.
pub const FALLBACK_POLL_MAX: Duration = Duration::from_secs(1);

fn trim(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

/// Splits `bytes` at every `sep` that is not inside a quoted string
/// (backslash escapes inside quotes honoured).
fn split_outside_quotes(bytes: &[u8], sep: u8) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(bytes);
    core::iter::from_fn(move || {
        let current = rest?;
        let (mut quoted, mut escaped) = (false, false);
        for (i, &b) in current.iter().enumerate() {
            if escaped {
                escaped = false;
            } else if quoted && b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                quoted = !quoted;
            } else if b == sep && !quoted {
                let (before, after) = current.split_at_checked(i)?;
                rest = after.get(1..);
                return Some(before);
            }
        }
        rest = None;
        Some(current)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_preference_is_found_among_others_in_any_case_and_quoting() {
        let rows: &[(&[u8], Option<u64>)] = &[
            (b"wait=5", Some(5)),
            (b"WAIT = 7", Some(7)),
            (b"respond-async, wait=10", Some(10)),
            (b"return=minimal; foo=\"a,wait=3\", wait=4", Some(4)),
            (b"wait=\"12\"", Some(12)),
            (b"wait=5;x=y", Some(5)),
            (b"wait=5, wait=9", Some(5)),
            (b"wait=-1", None),
            (b"wait=1.5", None),
            (b"wait", None),
            (b"wait=", None),
            (b"waiting=3", None),
            (b"", None),
            (b"wait=99999999999999999999999", Some(u64::MAX)),
        ];
        for (value, expected) in rows {
            assert_eq!(
                prefer_wait(value),
                *expected,
                "{:?}",
                core::str::from_utf8(value)
            );
        }
    }

    #[test]
    fn only_the_first_wait_across_header_lines_counts() {
        let lines: [&[u8]; 3] = [b"respond-async", b"wait=x", b"wait=3"];
        assert_eq!(prefer_wait_in(lines), None);
        let lines: [&[u8]; 2] = [b"return=minimal", b"wait=3"];
        assert_eq!(prefer_wait_in(lines), Some(3));
    }

    #[test]
    fn a_wait_is_capped_and_echoed_only_when_asked() {
        let rule = WaitRule {
            default_wait: Duration::from_millis(1_500),
            max_wait: Duration::from_secs(10),
        };
        let asked = rule.wait_for(Some(60));
        assert_eq!(asked.duration, Duration::from_secs(10));
        assert_eq!(asked.preference_applied().as_deref(), Some("wait=10"));
        let default = rule.wait_for(None);
        assert_eq!(default.duration, Duration::from_millis(1_500));
        assert_eq!(default.preference_applied(), None);
        let none = WaitRule::default().wait_for(None);
        assert_eq!(none.duration, Duration::ZERO);
    }

    #[test]
    fn fallback_polls_back_off_to_a_second() {
        assert_eq!(fallback_poll(0), Duration::from_millis(50));
        assert_eq!(fallback_poll(1), Duration::from_millis(100));
        assert_eq!(fallback_poll(4), Duration::from_millis(800));
        assert_eq!(fallback_poll(5), Duration::from_secs(1));
        assert_eq!(fallback_poll(u32::MAX), Duration::from_secs(1));
    }

    proptest::proptest! {
        #[test]
        fn parsing_any_bytes_never_panics(value in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let _ = prefer_wait(&value);
            let _ = prefer_wait_in([value.as_slice()]);
        }
    }
}
