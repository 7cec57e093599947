//! Client request latency at a replica, from the request's arrival at the
//! driver to its answer leaving it (protocol rounds and the persist wait
//! included; the socket and the client's own queueing not), as a
//! Prometheus histogram: `quorumkv_client_request_duration_seconds`.

use std::fmt::Write;
use std::time::Duration;

/// Upper bounds of the buckets, in microseconds: 100 µs to 5 s, about
/// three a decade (an fsync'd write on a fast disk lands near 0.5-2 ms).
const BOUNDS_US: [u64; 15] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000,
];

#[derive(Clone, Debug, Default)]
pub struct Latency {
    /// `counts[i]`: requests in bucket i (not cumulative); the last is +Inf.
    counts: [u64; BOUNDS_US.len() + 1],
    sum_us: u64,
}

impl Latency {
    pub fn record(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = BOUNDS_US.partition_point(|&b| b < us);
        self.counts[i] = self.counts[i].saturating_add(1);
        self.sum_us = self.sum_us.saturating_add(us);
    }

    /// The histogram in Prometheus text format for replica `id`.
    pub fn prometheus(&self, id: u32) -> String {
        let name = "quorumkv_client_request_duration_seconds";
        let mut s = format!(
            "# HELP {name} client requests from arrival at the replica to the answer\n# TYPE {name} histogram\n"
        );
        let mut total = 0u64;
        for (i, n) in self.counts.iter().enumerate() {
            total = total.saturating_add(*n);
            let le = match BOUNDS_US.get(i) {
                Some(us) => format!("{}", *us as f64 / 1e6),
                None => "+Inf".into(),
            };
            let _ = writeln!(s, "{name}_bucket{{replica=\"{id}\",le=\"{le}\"}} {total}");
        }
        let secs = self.sum_us as f64 / 1e6;
        let _ = writeln!(s, "{name}_sum{{replica=\"{id}\"}} {secs}");
        let _ = writeln!(s, "{name}_count{{replica=\"{id}\"}} {total}");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_bounds_inclusive() {
        let mut l = Latency::default();
        for us in [50, 100, 101, 3_000, 9_000_000] {
            l.record(Duration::from_micros(us));
        }
        let text = l.prometheus(2);
        let bucket = |le: &str| {
            let p = format!(
                "quorumkv_client_request_duration_seconds_bucket{{replica=\"2\",le=\"{le}\"}} "
            );
            let line = text.lines().find(|l| l.starts_with(&p)).expect(le);
            line[p.len()..].parse::<u64>().unwrap()
        };
        assert_eq!(bucket("0.0001"), 2, "{text}");
        assert_eq!(bucket("0.00025"), 3);
        assert_eq!(bucket("0.0025"), 3);
        assert_eq!(bucket("0.005"), 4);
        assert_eq!(bucket("5"), 4);
        assert_eq!(bucket("+Inf"), 5);
        assert!(text.contains("_count{replica=\"2\"} 5\n"), "{text}");
        assert!(text.contains("_sum{replica=\"2\"} 9.003251\n"), "{text}");
    }
}
