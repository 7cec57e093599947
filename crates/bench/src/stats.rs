//! Latency histograms (HdrHistogram, microseconds, 3 significant digits),
//! success and failure counters, and their summaries.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Latencies are recorded in µs between 1 µs and 10 min; larger values clamp.
const MAX_US: u64 = 600_000_000;

/// The operation types the bench issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpKind {
    Get,
    Put,
}

/// Everything one logical client (or the whole point, after merging) measured.
#[derive(Clone, Debug)]
pub struct Stats {
    pub get: Histogram<u64>,
    pub put: Histogram<u64>,
    pub ok_get: u64,
    pub ok_put: u64,
    /// Failed operations by reason ("timeout", "rejected", "shed", …).
    pub failures: BTreeMap<String, u64>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 3).expect("static histogram bounds are valid")
}

impl Stats {
    pub fn new() -> Stats {
        Stats {
            get: new_hist(),
            put: new_hist(),
            ok_get: 0,
            ok_put: 0,
            failures: BTreeMap::new(),
        }
    }

    /// A successful operation and its latency.
    pub fn record_ok(&mut self, kind: OpKind, latency: Duration) {
        let us = (latency.as_micros() as u64).clamp(1, MAX_US);
        match kind {
            OpKind::Get => {
                self.ok_get += 1;
                self.get.saturating_record(us);
            }
            OpKind::Put => {
                self.ok_put += 1;
                self.put.saturating_record(us);
            }
        }
    }

    /// A failed operation. Failures do not enter the latency histograms.
    pub fn record_fail(&mut self, reason: &str) {
        *self.failures.entry(reason.to_string()).or_default() += 1;
    }

    pub fn merge(&mut self, other: &Stats) {
        self.get.add(&other.get).expect("same bounds");
        self.put.add(&other.put).expect("same bounds");
        self.ok_get += other.ok_get;
        self.ok_put += other.ok_put;
        for (k, v) in &other.failures {
            *self.failures.entry(k.clone()).or_default() += v;
        }
    }

    pub fn ok(&self) -> u64 {
        self.ok_get + self.ok_put
    }

    pub fn failed(&self) -> u64 {
        self.failures.values().sum()
    }
}

/// avg / p50 / p90 / p95 / p99 / max of one operation type, in microseconds
/// (p90 is in the JSON only: seed 003's Fig. 5.7 and 5.10 plot p90/p95).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub avg_us: f64,
    pub p50_us: u64,
    #[serde(default)]
    pub p90_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl LatencySummary {
    pub fn of(h: &Histogram<u64>) -> LatencySummary {
        if h.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: h.len(),
            avg_us: h.mean(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p95_us: h.value_at_quantile(0.95),
            p99_us: h.value_at_quantile(0.99),
            max_us: h.max(),
        }
    }
}

/// Successful operations per second; failures never count (seed 000 §5.1).
pub fn throughput(ok: u64, elapsed: Duration) -> f64 {
    let s = elapsed.as_secs_f64();
    if s > 0.0 {
        ok as f64 / s
    } else {
        0.0
    }
}
