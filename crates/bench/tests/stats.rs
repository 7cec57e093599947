//! Histogram and percentile math.

use std::time::Duration;

use quorumkv_bench::stats::{throughput, LatencySummary, OpKind, Stats};

#[test]
fn percentiles_of_a_known_distribution() {
    let mut s = Stats::new();
    for us in 1..=1000u64 {
        s.record_ok(OpKind::Get, Duration::from_micros(us));
    }
    let l = LatencySummary::of(&s.get);
    assert_eq!(l.count, 1000);
    assert!((l.avg_us - 500.5).abs() < 1.0, "{l:?}");
    // HdrHistogram with 3 significant digits: within 0.1 %.
    assert!((499..=501).contains(&l.p50_us), "{l:?}");
    assert!((949..=951).contains(&l.p95_us), "{l:?}");
    assert!((989..=991).contains(&l.p99_us), "{l:?}");
    assert!((999..=1001).contains(&l.max_us), "{l:?}");
    assert_eq!(LatencySummary::of(&s.put), LatencySummary::default());
}

#[test]
fn tail_percentiles_see_outliers() {
    let mut s = Stats::new();
    for _ in 0..98 {
        s.record_ok(OpKind::Put, Duration::from_micros(100));
    }
    s.record_ok(OpKind::Put, Duration::from_millis(50));
    s.record_ok(OpKind::Put, Duration::from_millis(50));
    let l = LatencySummary::of(&s.put);
    assert_eq!(l.p50_us, 100);
    assert_eq!(l.p95_us, 100);
    assert!((49_950..=50_050).contains(&l.p99_us), "{l:?}");
}

#[test]
fn merge_counts_and_failures() {
    let mut a = Stats::new();
    let mut b = Stats::new();
    a.record_ok(OpKind::Get, Duration::from_micros(10));
    b.record_ok(OpKind::Put, Duration::from_micros(20));
    b.record_fail("timeout");
    b.record_fail("timeout");
    a.record_fail("shed");
    a.merge(&b);
    assert_eq!((a.ok_get, a.ok_put, a.ok(), a.failed()), (1, 1, 2, 3));
    assert_eq!(a.failures["timeout"], 2);
    assert_eq!(a.get.len() + a.put.len(), 2);
    // Sub-microsecond latencies are clamped to 1 µs rather than lost.
    a.record_ok(OpKind::Get, Duration::from_nanos(10));
    assert_eq!(a.get.min(), 1);
}

#[test]
fn throughput_counts_successes_per_second() {
    assert_eq!(throughput(3000, Duration::from_secs(2)), 1500.0);
    assert_eq!(throughput(10, Duration::ZERO), 0.0);
}

#[test]
fn open_loop_lateness_beyond_the_timer_slack_counts() {
    use quorumkv_bench::runner::late_start;
    use std::time::Instant;
    let t = Instant::now();
    assert_eq!(
        late_start(t, t + Duration::from_micros(400)),
        Duration::ZERO
    );
    assert_eq!(
        late_start(t, t + Duration::from_millis(5)),
        Duration::from_millis(4)
    );
    // Started before its slot (never happens, but must not underflow).
    assert_eq!(late_start(t + Duration::from_millis(1), t), Duration::ZERO);
}
