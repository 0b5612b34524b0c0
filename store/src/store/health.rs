//! Whether a store can write now, for health checks ([`Store::health`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Store;

/// What a health check learns of a store ([`Store::health`]).
///
/// A store that cannot write answers every new key 503 (nothing executes
/// without a claim), while stored answers may still replay: a service whose
/// health check reports this should be taken out of rotation until it
/// recovers, which it does on its own once the cause is gone (a redb file is
/// reopened, a PostgreSQL pool reconnects).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// Why the store cannot write now; `None` when it can.
    pub unwritable: Option<String>,
    /// Since when it cannot write (the adapter's account, else when this
    /// process first saw it).
    pub since: Option<SystemTime>,
    /// When this process last saw it write or found it writable.
    pub last_writable: Option<SystemTime>,
}

impl Health {
    /// Whether the store can write now.
    #[must_use]
    pub fn is_writable(&self) -> bool {
        self.unwritable.is_none()
    }

    /// The health as JSON for a health endpoint: `{"status":"ok"|"unavailable",
    /// "writable":…, "reason":…, "since":…, "last_writable":…}`, instants in
    /// Unix milliseconds, absent fields left out.
    #[must_use]
    pub fn to_json(&self) -> String {
        let mut out = String::from("{");
        out.push_str(if self.is_writable() {
            r#""status":"ok","writable":true"#
        } else {
            r#""status":"unavailable","writable":false"#
        });
        if let Some(reason) = &self.unwritable {
            out.push_str(r#","reason":"#);
            push_json_string(&mut out, reason);
        }
        for (name, at) in [("since", self.since), ("last_writable", self.last_writable)] {
            if let Some(ms) = at.map(unix_millis) {
                out.push_str(&format!(r#","{name}_ms":{ms}"#));
            }
        }
        out.push('}');
        out
    }
}

fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `text` as a JSON string (RFC 8259 escapes).
fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
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
    /// ```
    /// use idemkit::store::Store;
    ///
    /// let store = Store::in_memory().unwrap();
    /// let health = store.health();
    /// assert!(health.is_writable());
    /// assert!(health.to_json().starts_with(r#"{"status":"ok","writable":true"#));
    /// ```
    #[must_use]
    pub fn health(&self) -> Health {
        let adapter = self.adapter.health();
        let seen: &Arc<Seen> = &self.seen;
        let now_at = SystemTime::now();
        let now = unix_millis(now_at);
        match adapter.unwritable {
            None => {
                seen.last_writable.store(now, Ordering::Relaxed);
                seen.unwritable_since.store(0, Ordering::Relaxed);
                Health {
                    unwritable: None,
                    since: None,
                    last_writable: Some(now_at),
                }
            }
            Some(reason) => {
                let _ = seen.unwritable_since.compare_exchange(
                    0,
                    now,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                let last_seen = at(seen.last_writable.load(Ordering::Relaxed));
                Health {
                    unwritable: Some(reason),
                    since: adapter
                        .since
                        .or_else(|| at(seen.unwritable_since.load(Ordering::Relaxed))),
                    last_writable: match (adapter.last_write, last_seen) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    },
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_names_the_reason_escaped_and_the_instants() {
        let health = Health {
            unwritable: Some("disk \"full\"\n".to_owned()),
            since: Some(UNIX_EPOCH + Duration::from_millis(5)),
            last_writable: None,
        };
        assert_eq!(
            health.to_json(),
            r#"{"status":"unavailable","writable":false,"reason":"disk \"full\"\n","since_ms":5}"#
        );
        let parsed: serde_json::Value = serde_json::from_str(&health.to_json()).unwrap();
        assert_eq!(parsed["reason"], "disk \"full\"\n");
    }
}
