//! What the console's charts draw: every [`INTERVAL`], the claims counted so
//! far by outcome and how many records are Unknown and unresolved, kept for
//! [`KEPT`] samples in memory (an hour), so a page opened now shows the last
//! hour at once.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemkit::core::record::StateName;
use idemkit::http::Metrics;
use idemkit::store::{Listing, Store};
use serde::Serialize;

/// How often a sample is taken.
pub(crate) const INTERVAL: Duration = Duration::from_secs(5);
/// How many samples are kept.
const KEPT: usize = 720;
/// Records counted per gauge at most: counting must stay cheap on a store
/// with very many Unknown records (the chart then shows the cap, flagged).
const COUNT_CAP: usize = 10_000;

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Sample {
    pub(crate) at_ms: u64,
    /// Claims since start, by outcome (`execute`, `replay`, …).
    pub(crate) claims: serde_json::Map<String, serde_json::Value>,
    pub(crate) unknown: usize,
    pub(crate) unresolved: usize,
    /// Whether a count reached [`COUNT_CAP`] and stopped there.
    pub(crate) capped: bool,
}

#[derive(Default)]
pub(crate) struct Samples {
    kept: Mutex<VecDeque<Sample>>,
}

impl Samples {
    /// Takes one sample now (on the blocking pool: it scans the store).
    pub(crate) async fn take(store: &Store, metrics: &Metrics) -> Option<Sample> {
        let claims = metrics
            .claims_by_outcome()
            .iter()
            .map(|(outcome, n)| (outcome.as_str().to_owned(), (*n).into()))
            .collect();
        let store = store.clone();
        let counted = tokio::task::spawn_blocking(move || {
            let unknown = count(&store, Listing::State(StateName::Unknown))?;
            let unresolved = count(&store, Listing::Unresolved)?;
            Some((unknown, unresolved, store.now().as_millis()))
        })
        .await
        .ok()
        .flatten()?;
        let (unknown, unresolved, at_ms) = counted;
        Some(Sample {
            at_ms,
            claims,
            unknown: unknown.min(COUNT_CAP),
            unresolved: unresolved.min(COUNT_CAP),
            capped: unknown >= COUNT_CAP || unresolved >= COUNT_CAP,
        })
    }

    fn keep(&self, sample: Sample) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() >= KEPT {
            kept.pop_front();
        }
        kept.push_back(sample);
    }

    /// The samples kept, oldest first.
    pub(crate) fn all(&self) -> Vec<Sample> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter().cloned().collect()
    }

    /// Samples every [`INTERVAL`] for as long as the process runs.
    pub(crate) fn spawn(self: &Arc<Self>, store: Store, metrics: Arc<Metrics>) {
        let samples = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Some(sample) = Samples::take(&store, &metrics).await {
                    samples.keep(sample);
                }
            }
        });
    }
}

/// Records `listing` lists, counted up to [`COUNT_CAP`]; `None` if the store failed.
fn count(store: &Store, listing: Listing) -> Option<usize> {
    let mut counted = 0;
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = store.list_page(listing, after.as_deref(), 1_000).ok()?;
        counted += page.records.len();
        match page.next {
            Some(next) if counted < COUNT_CAP => after = Some(next),
            _ => return Some(counted),
        }
    }
}
