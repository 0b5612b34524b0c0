//! Whether a store can write now, for health checks ([`Store::health`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Store;
use crate::adapters::{Health, Wakeups};

fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What this process saw of a store's health between checks (shared by the
/// store's clones): the adapter may not know since when it fails, or when it
/// last wrote.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Unix ms; 0: never.
    last_writable: AtomicU64,
    /// Unix ms; 0: writable at the last check.
    unwritable_since: AtomicU64,
}

fn at(ms: u64) -> Option<SystemTime> {
    (ms > 0).then(|| UNIX_EPOCH + Duration::from_millis(ms))
}

impl Store {
    /// Whether this store can write now, asking its adapter
    /// ([`Adapter::health`](crate::adapters::Adapter::health)): a redb file that
    /// failed a write is given a reopen attempt first, PostgreSQL is asked
    /// whether it accepts writes. It may do I/O; call it from a blocking
    /// context (the reference service and `idemkit proxy` serve it as `503`
    /// with the reason while unwritable).
    ///
    /// It also says how this process's waits on a running key end
    /// ([`Wakeups`]): PostgreSQL's listener down shows as `polling`.
    ///
    /// ```
    /// let store = idemkit::in_memory().unwrap();
    /// let health = store.health();
    /// assert!(health.is_writable());
    /// assert!(health.to_json().starts_with(r#"{"status":"ok","writable":true"#));
    /// assert!(health.to_json().ends_with(r#","wakeups":"in-process"}"#));
    /// ```
    #[must_use]
    pub fn health(&self) -> Health {
        self.writability().wakeups(Some(self.wakeups()))
    }

    /// How this process's waits on a running key end now.
    #[must_use]
    pub fn wakeups(&self) -> Wakeups {
        if self.adapter.held_alone() {
            Wakeups::InProcess
        } else if !self.waiters.started() {
            Wakeups::NotStarted
        } else if self.waits_are_woken() {
            Wakeups::Listening
        } else {
            Wakeups::Polling
        }
    }

    fn writability(&self) -> Health {
        let adapter = self.adapter.health();
        let seen: &Arc<Seen> = &self.seen;
        let now_at = SystemTime::now();
        let now = unix_millis(now_at);
        match adapter.unwritable {
            None => {
                seen.last_writable.store(now, Ordering::Relaxed);
                seen.unwritable_since.store(0, Ordering::Relaxed);
                Health::writable().last_writable(Some(now_at))
            }
            Some(reason) => {
                let _ = seen.unwritable_since.compare_exchange(
                    0,
                    now,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                let last_seen = at(seen.last_writable.load(Ordering::Relaxed));
                Health::unwritable(reason)
                    .since(
                        adapter
                            .since
                            .or_else(|| at(seen.unwritable_since.load(Ordering::Relaxed))),
                    )
                    .last_writable(match (adapter.last_writable, last_seen) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_names_the_reason_escaped_and_the_instants() {
        let health = Health::unwritable("disk \"full\"\n")
            .since(Some(UNIX_EPOCH + Duration::from_millis(5)));
        assert_eq!(
            health.to_json(),
            r#"{"status":"unavailable","writable":false,"reason":"disk \"full\"\n","since_ms":5}"#
        );
        let parsed: serde_json::Value = serde_json::from_str(&health.to_json()).unwrap();
        assert_eq!(parsed["reason"], "disk \"full\"\n");
    }

    #[test]
    fn json_says_how_waits_end() {
        for (wakeups, name) in [
            (Wakeups::InProcess, "in-process"),
            (Wakeups::NotStarted, "not-started"),
            (Wakeups::Listening, "listening"),
            (Wakeups::Polling, "polling"),
        ] {
            let json = Health::writable().wakeups(Some(wakeups)).to_json();
            assert_eq!(
                json,
                format!(r#"{{"status":"ok","writable":true,"wakeups":"{name}"}}"#)
            );
        }
    }
}
