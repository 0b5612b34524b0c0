//! Per-operation latencies: every sample kept, sorted once, read by rank.

use std::time::Duration;

/// Latency samples in nanoseconds.
#[derive(Clone, Debug, Default)]
pub struct Latencies {
    samples: Vec<u64>,
    sorted: bool,
}

impl Latencies {
    /// An empty set with room for `n` samples.
    #[must_use]
    pub fn with_capacity(n: usize) -> Self {
        Latencies {
            samples: Vec::with_capacity(n),
            sorted: true,
        }
    }

    /// Adds one sample.
    pub fn record(&mut self, d: Duration) {
        self.samples
            .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.sorted = false;
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: Latencies) {
        self.samples.extend(other.samples);
        self.sorted = false;
    }

    /// How many samples.
    #[must_use]
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The `q` quantile (0.0–1.0, nearest rank) in microseconds; 0 when empty.
    pub fn quantile_us(&mut self, q: f64) -> f64 {
        if !self.sorted {
            self.samples.sort_unstable();
            self.sorted = true;
        }
        let n = self.samples.len();
        if n == 0 {
            return 0.0;
        }
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        let ns = self.samples.get(rank - 1).copied().unwrap_or(0);
        round2(ns as f64 / 1000.0)
    }

    /// The mean in microseconds; 0 when empty.
    #[must_use]
    pub fn mean_us(&self) -> f64 {
        if self.samples.is_empty() {
            return 0.0;
        }
        let sum: u128 = self.samples.iter().map(|&s| u128::from(s)).sum();
        round2(sum as f64 / self.samples.len() as f64 / 1000.0)
    }

    /// `{"n", "p50_us", "p99_us", "mean_us", "max_us"}`.
    pub fn summary(&mut self) -> serde_json::Value {
        serde_json::json!({
            "n": self.len(),
            "p50_us": self.quantile_us(0.50),
            "p99_us": self.quantile_us(0.99),
            "mean_us": self.mean_us(),
            "max_us": self.quantile_us(1.0),
        })
    }
}

/// Rounds to two decimals (results are read by people).
#[must_use]
pub fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
