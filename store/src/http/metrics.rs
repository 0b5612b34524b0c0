//! Prometheus metrics of the middleware (and of `idemkit proxy`, which is the
//! middleware in front of an upstream).
//!
//! One [`Metrics`] is shared by every route that is given it
//! ([`RouteConfig::metrics`](super::RouteConfig::metrics)); [`Metrics::render`]
//! gives the Prometheus text format for a `/metrics` endpoint:
//!
//! - `idemkit_claims_total{operation,outcome}`: `execute`, `replay`,
//!   `in_flight`, `mismatch`, `uncertain`, `response_expired`;
//! - `idemkit_outcomes_total{operation,disposition}`: `stored`, `released`,
//!   `unknown` (what was recorded after the handler answered);
//! - `idemkit_execution_seconds{operation}`: how long executions took (histogram);
//! - `idemkit_store_errors_total`: store calls that failed (a claim answered 503,
//!   an outcome that needed a retry or could not be recorded);
//! - `idemkit_store_writable`: 1 while the store can write, 0 while it cannot
//!   (set by each health check: [`Metrics::store_health`], which
//!   [`health_response`](super::health_response) and `idemkit proxy`'s
//!   `/metrics` call);
//! - `idemkit_waits_total{operation,ended}`: retries held for their key's
//!   running attempt (`Prefer: wait`), by how the wait ended: `answered`,
//!   `executed` (the first attempt released its claim), `timed_out`,
//!   `too_many_waiters`, `client_gone`;
//! - `idemkit_waiting_requests`: requests held now (set before a scrape by
//!   [`Metrics::store_waiting`], which `idemkit proxy`'s `/metrics` calls);
//! - `idemkit_gc_deleted_total`: records GC deleted ([`Metrics::gc_deleted`]);
//! - `idemkit_orphans_settled_total`: executions a crashed process left
//!   running, settled when the store was opened
//!   ([`Store::orphans_settled_at_open`](crate::store::Store::orphans_settled_at_open));
//! - `idemkit_tls_certificate_expiry_timestamp_seconds{listener}`: when the
//!   certificate a TLS listener serves stops being valid (its `notAfter`, Unix
//!   seconds; [`Metrics::tls_certificate`]), for an alert well before it;
//! - `idemkit_tls_handshake_failures_total{listener}`: connections whose TLS
//!   handshake failed ([`Metrics::tls_handshake_failed`]): plain HTTP sent to
//!   the port, a client that refused the certificate, one that left.
//!
//! ```
//! use std::sync::Arc;
//! use idemkit::http::{ClaimOutcomeLabel, Metrics, RouteConfig};
//! use idemkit::core::record::EffectKind;
//!
//! let metrics = Arc::new(Metrics::new());
//! let route = RouteConfig::new("payments.capture", EffectKind::External).metrics(Arc::clone(&metrics));
//! # let _ = route;
//! // The layer counts as it answers; a test can count by hand.
//! metrics.claim("payments.capture", ClaimOutcomeLabel::Replay);
//! let text = metrics.render();
//! assert!(text.contains(r#"idemkit_claims_total{operation="payments.capture",outcome="replay"} 1"#));
//! assert!(text.contains("idemkit_store_errors_total 0"));
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idemkit_core::LogRef;
use idemkit_core::machine::Disposition;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// What the layer's claim decided for a request: an extension of the
/// response the layer answers with, for access logs and tracing around it.
/// Absent when the request made no claim (refused before one: no key, no
/// tenant, a body over the limit, the store unavailable).
///
/// ```
/// use idemkit::http::{ClaimAnswered, ClaimOutcomeLabel};
///
/// fn outcome_of(response: &axum::http::Response<axum::body::Body>) -> &'static str {
///     response
///         .extensions()
///         .get::<ClaimAnswered>()
///         .map_or("none", |claim| claim.outcome.as_str())
/// }
/// assert_eq!(outcome_of(&axum::http::Response::new(axum::body::Body::empty())), "none");
/// # let _ = ClaimOutcomeLabel::Replay;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClaimAnswered {
    /// The claim's outcome.
    pub outcome: ClaimOutcomeLabel,
    /// The record's log reference: what logs, the admin API and the operator
    /// console name it by (never the key itself).
    pub log_ref: LogRef,
}

/// What a claim answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimOutcomeLabel {
    /// The handler ran.
    Execute,
    /// A stored response was replayed.
    Replay,
    /// Another attempt held the lease (409 `request-in-progress`).
    InFlight,
    /// The key was used for another request (422).
    Mismatch,
    /// The outcome is unknown (409 `outcome-uncertain`).
    Uncertain,
    /// Completed, response no longer kept (410).
    ResponseExpired,
}

impl ClaimOutcomeLabel {
    /// Every label, in the order [`Metrics::claims_by_outcome`] counts them.
    pub const ALL: [ClaimOutcomeLabel; 6] = [
        ClaimOutcomeLabel::Execute,
        ClaimOutcomeLabel::Replay,
        ClaimOutcomeLabel::InFlight,
        ClaimOutcomeLabel::Mismatch,
        ClaimOutcomeLabel::Uncertain,
        ClaimOutcomeLabel::ResponseExpired,
    ];

    /// The label's value in the `idemkit_claims_total` series (`execute`, …).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimOutcomeLabel::Execute => "execute",
            ClaimOutcomeLabel::Replay => "replay",
            ClaimOutcomeLabel::InFlight => "in_flight",
            ClaimOutcomeLabel::Mismatch => "mismatch",
            ClaimOutcomeLabel::Uncertain => "uncertain",
            ClaimOutcomeLabel::ResponseExpired => "response_expired",
        }
    }
}

/// How a held retry's wait for its key's running attempt ended
/// (`Prefer: wait`, [`RouteConfig::wait`](super::RouteConfig::wait)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitEnded {
    /// The first attempt recorded: the retry got that answer.
    Answered,
    /// The first attempt released its claim (or its lease ran out): the
    /// retry claimed and executed.
    Executed,
    /// The wait ran out: 409 `request-in-progress`.
    TimedOut,
    /// As many requests as allowed already waited: 503 `too-many-waiters`.
    TooManyWaiters,
    /// The client left while held.
    ClientGone,
}

impl WaitEnded {
    fn as_str(self) -> &'static str {
        match self {
            WaitEnded::Answered => "answered",
            WaitEnded::Executed => "executed",
            WaitEnded::TimedOut => "timed_out",
            WaitEnded::TooManyWaiters => "too_many_waiters",
            WaitEnded::ClientGone => "client_gone",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitLabels {
    operation: String,
    ended: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClaimLabels {
    operation: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    operation: String,
    disposition: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: String,
}

type HistogramFamily = Family<OperationLabels, Histogram, fn() -> Histogram>;

/// The counters and the histogram, with their registry.
pub struct Metrics {
    registry: Registry,
    claims: Family<ClaimLabels, Counter>,
    outcomes: Family<OutcomeLabels, Counter>,
    execution: HistogramFamily,
    store_errors: Counter,
    store_writable: Gauge,
    waits: Family<WaitLabels, Counter>,
    waiting: Gauge,
    gc_deleted: Counter,
    orphans_settled: Counter,
    tls_expiry: Family<ListenerLabels, Gauge>,
    tls_handshake_failures: Family<ListenerLabels, Counter>,
    /// Claims by outcome over every operation, for a summary that must not
    /// walk the per-operation families (the console's charts).
    claim_totals: [AtomicU64; 6],
}

fn execution_buckets() -> Histogram {
    // 1 ms … about 33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

impl Metrics {
    /// Empty metrics, registered under their `idemkit_` names.
    #[must_use]
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let claims = Family::<ClaimLabels, Counter>::default();
        let outcomes = Family::<OutcomeLabels, Counter>::default();
        let execution: HistogramFamily = Family::new_with_constructor(execution_buckets);
        let store_errors = Counter::default();
        let store_writable = Gauge::default();
        // Writable until a health check finds otherwise.
        store_writable.set(1);
        let waits = Family::<WaitLabels, Counter>::default();
        let waiting = Gauge::default();
        let gc_deleted = Counter::default();
        let orphans_settled = Counter::default();
        let tls_expiry = Family::<ListenerLabels, Gauge>::default();
        let tls_handshake_failures = Family::<ListenerLabels, Counter>::default();
        registry.register(
            "idemkit_claims",
            "Claims by operation and what they answered",
            claims.clone(),
        );
        registry.register(
            "idemkit_outcomes",
            "Outcomes recorded after the handler answered, by disposition",
            outcomes.clone(),
        );
        registry.register(
            "idemkit_execution_seconds",
            "How long executions took",
            execution.clone(),
        );
        registry.register(
            "idemkit_store_errors",
            "Store calls that failed",
            store_errors.clone(),
        );
        registry.register(
            "idemkit_store_writable",
            "Whether the store could write at the last health check (1) or not (0)",
            store_writable.clone(),
        );
        registry.register(
            "idemkit_waits",
            "Retries held for their key's running attempt (Prefer: wait), by how the wait ended",
            waits.clone(),
        );
        registry.register(
            "idemkit_waiting_requests",
            "Requests held for their key's running attempt at the last scrape",
            waiting.clone(),
        );
        registry.register(
            "idemkit_gc_deleted",
            "Records deleted by GC",
            gc_deleted.clone(),
        );
        registry.register(
            "idemkit_orphans_settled",
            "Executions a crashed process left running, settled when the store was opened",
            orphans_settled.clone(),
        );
        registry.register(
            "idemkit_tls_certificate_expiry_timestamp_seconds",
            "When the certificate a TLS listener serves expires (notAfter, Unix seconds)",
            tls_expiry.clone(),
        );
        registry.register(
            "idemkit_tls_handshake_failures",
            "Connections to a TLS listener whose handshake failed",
            tls_handshake_failures.clone(),
        );
        Metrics {
            registry,
            claims,
            outcomes,
            execution,
            store_errors,
            store_writable,
            waits,
            waiting,
            gc_deleted,
            orphans_settled,
            tls_expiry,
            tls_handshake_failures,
            claim_totals: Default::default(),
        }
    }

    /// Counts one claim of `operation` that answered `outcome`.
    pub fn claim(&self, operation: &str, outcome: ClaimOutcomeLabel) {
        self.claims
            .get_or_create(&ClaimLabels {
                operation: operation.to_owned(),
                outcome: outcome.as_str(),
            })
            .inc();
        let slot = ClaimOutcomeLabel::ALL.iter().position(|o| *o == outcome);
        if let Some(total) = slot.and_then(|i| self.claim_totals.get(i)) {
            total.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Claims counted since start, by outcome over every operation, in the
    /// order of [`ClaimOutcomeLabel::ALL`].
    #[must_use]
    pub fn claims_by_outcome(&self) -> [(ClaimOutcomeLabel, u64); 6] {
        let mut out = ClaimOutcomeLabel::ALL.map(|o| (o, 0));
        for ((_, count), total) in out.iter_mut().zip(&self.claim_totals) {
            *count = total.load(Ordering::Relaxed);
        }
        out
    }

    /// Counts one recorded outcome.
    pub fn outcome(&self, operation: &str, disposition: Disposition) {
        let disposition = match disposition {
            Disposition::Store => "stored",
            Disposition::Release => "released",
            Disposition::Unknown => "unknown",
        };
        self.outcomes
            .get_or_create(&OutcomeLabels {
                operation: operation.to_owned(),
                disposition,
            })
            .inc();
    }

    /// Observes how long one execution of `operation` took.
    pub fn execution(&self, operation: &str, took: Duration) {
        self.execution
            .get_or_create(&OperationLabels {
                operation: operation.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// Counts a failed store call.
    pub fn store_error(&self) {
        self.store_errors.inc();
    }

    /// Sets `idemkit_store_writable` from a health check's finding.
    pub fn store_health(&self, health: &crate::store::Health) {
        self.store_writable.set(i64::from(health.is_writable()));
    }

    /// Counts one held retry of `operation` whose wait `ended` so.
    pub fn wait_ended(&self, operation: &str, ended: WaitEnded) {
        self.waits
            .get_or_create(&WaitLabels {
                operation: operation.to_owned(),
                ended: ended.as_str(),
            })
            .inc();
    }

    /// Sets the held-requests gauge to what `store` holds now (call before a
    /// scrape is rendered).
    pub fn store_waiting(&self, store: &crate::store::Store) {
        self.waiting
            .set(i64::try_from(store.waiting()).unwrap_or(i64::MAX));
    }

    /// Counts records deleted by GC.
    pub fn gc_deleted(&self, deleted: u64) {
        self.gc_deleted.inc_by(deleted);
    }

    /// Counts executions of a crashed process settled when the store was opened.
    pub fn orphans_settled(&self, settled: usize) {
        self.orphans_settled
            .inc_by(u64::try_from(settled).unwrap_or(u64::MAX));
    }

    /// Sets when the certificate the TLS listener `listener` serves expires:
    /// its `notAfter`, in Unix seconds. Called when the certificate is loaded
    /// and again whenever a renewal replaces it.
    pub fn tls_certificate(&self, listener: &str, not_after_unix_seconds: i64) {
        self.tls_expiry
            .get_or_create(&ListenerLabels {
                listener: listener.to_owned(),
            })
            .set(not_after_unix_seconds);
    }

    /// Counts a connection to the TLS listener `listener` whose handshake failed.
    pub fn tls_handshake_failed(&self, listener: &str) {
        self.tls_handshake_failures
            .get_or_create(&ListenerLabels {
                listener: listener.to_owned(),
            })
            .inc();
    }

    /// The Prometheus text exposition format (version 0.0.4 / OpenMetrics text).
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_with_its_labels() {
        let m = Metrics::new();
        m.claim("payments.capture", ClaimOutcomeLabel::Execute);
        m.claim("payments.capture", ClaimOutcomeLabel::Replay);
        m.claim("payments.capture", ClaimOutcomeLabel::Replay);
        m.outcome("payments.capture", Disposition::Unknown);
        m.execution("payments.capture", Duration::from_millis(20));
        m.store_error();
        m.gc_deleted(3);
        m.orphans_settled(2);
        m.tls_certificate("proxy", 1_936_828_800);
        m.tls_handshake_failed("admin");
        m.tls_handshake_failed("admin");
        let mut unwritable = crate::in_memory().unwrap().health();
        assert!(m.render().contains("idemkit_store_writable 1"));
        unwritable.unwritable = Some("disk full".to_owned());
        m.store_health(&unwritable);
        let text = m.render();
        for line in [
            r#"idemkit_claims_total{operation="payments.capture",outcome="replay"} 2"#,
            r#"idemkit_tls_certificate_expiry_timestamp_seconds{listener="proxy"} 1936828800"#,
            r#"idemkit_tls_handshake_failures_total{listener="admin"} 2"#,
            r#"idemkit_claims_total{operation="payments.capture",outcome="execute"} 1"#,
            r#"idemkit_outcomes_total{operation="payments.capture",disposition="unknown"} 1"#,
            r#"idemkit_execution_seconds_count{operation="payments.capture"} 1"#,
            "idemkit_store_errors_total 1",
            "idemkit_store_writable 0",
            "idemkit_gc_deleted_total 3",
            "idemkit_orphans_settled_total 2",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
