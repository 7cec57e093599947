//! Seed 004 §5's setup: clients pinned evenly to servers, dedicated
//! readers and writers, per-server shares of the writes, MB/s.

use quorumkv_bench::config::Sharing;
use quorumkv_bench::report::{shares_cell, PointResult};
use quorumkv_bench::runner::conn_count;
use quorumkv_bench::target::pinned_order;
use quorumkv_bench::workload::dedicated_reader;

/// The server logical client `c` reaches: connection c mod count, whose
/// proxy is server (c mod count) mod N (as `runner::run_point` wires it).
fn server_of(c: usize, sharing: Sharing, clients: usize, n: usize) -> usize {
    let conns = conn_count(sharing, clients, Some(n));
    pinned_order(&(0..n).collect::<Vec<_>>(), c % conns)[0]
}

#[test]
fn pinned_order_puts_server_k_first_and_keeps_the_rest_for_failover() {
    let eps = ["a", "b", "c", "d"];
    assert_eq!(pinned_order(&eps, 0), ["a", "b", "c", "d"]);
    assert_eq!(pinned_order(&eps, 2), ["c", "d", "a", "b"]);
    assert_eq!(pinned_order(&eps, 5), ["b", "c", "d", "a"]);
    assert!(pinned_order::<u8>(&[], 3).is_empty());
}

#[test]
fn client_i_talks_to_server_i_mod_n_whether_connections_are_shared_or_not() {
    for n in 2..=8 {
        for sharing in [Sharing::Shared, Sharing::PerClient] {
            let clients = 48;
            let mut load = vec![0; n];
            for c in 0..clients {
                let s = server_of(c, sharing, clients, n);
                assert_eq!(s, c % n, "n={n} {sharing} client {c}");
                load[s] += 1;
            }
            let (lo, hi) = (load.iter().min().unwrap(), load.iter().max().unwrap());
            assert!(hi - lo <= 1, "n={n}: {load:?}");
        }
    }
    assert_eq!(conn_count(Sharing::Shared, 48, Some(6)), 6);
    assert_eq!(conn_count(Sharing::Shared, 48, None), 1);
    assert_eq!(conn_count(Sharing::PerClient, 48, Some(6)), 48);
}

#[test]
fn dedicated_clients_give_every_server_one_reader_and_one_writer() {
    for n in 2..=8 {
        let clients = 2 * n;
        let mut readers = vec![0; n];
        let mut writers = vec![0; n];
        for c in 0..clients {
            match dedicated_reader(c, clients, 0.5) {
                true => readers[c % n] += 1,
                false => writers[c % n] += 1,
            }
        }
        assert_eq!(readers, vec![1; n], "n={n}");
        assert_eq!(writers, vec![1; n], "n={n}");
    }
    // Fewer clients than servers: one reader (server 0), one writer (server 1).
    assert!(dedicated_reader(0, 2, 0.5) && !dedicated_reader(1, 2, 0.5));
    // Four per server (N = 3), a quarter reading: one reader and three
    // writers each.
    let readers: Vec<usize> = (0..12).filter(|&c| dedicated_reader(c, 12, 0.25)).collect();
    assert_eq!(readers, [0, 1, 2]);
    // The extremes: everyone reads, or everyone writes.
    assert!((0..10).all(|c| dedicated_reader(c, 10, 1.0)));
    assert!((0..10).all(|c| !dedicated_reader(c, 10, 0.0)));
}

fn result(value_size: usize, throughput: f64, server_puts: Vec<u64>) -> PointResult {
    let mut r: PointResult = serde_json::from_str(
        r#"{"target":"ring","kind":"local","replicas":4,"clients":8,"connections":"",
        "get_fraction":0.0,"keys":10,"distribution":"uniform","value_size":16,"rate":null,
        "elapsed_s":2.0,"throughput":0.0,"ok_get":300,"ok_put":100,"failed":0,"failures":{},
        "get":{"count":0,"avg_us":0.0,"p50_us":0,"p95_us":0,"p99_us":0,"max_us":0},
        "put":{"count":0,"avg_us":0.0,"p50_us":0,"p95_us":0,"p99_us":0,"max_us":0},
        "all":{"count":0,"avg_us":0.0,"p50_us":0,"p95_us":0,"p99_us":0,"max_us":0},
        "cpu_s_per_kop":null,"client_cpu_s_per_kop":null,"check":null,"note":null}"#,
    )
    .expect("a results.json point of before the ring fields still reads");
    r.value_size = value_size;
    r.throughput = throughput;
    r.server_puts = server_puts;
    r
}

#[test]
fn megabytes_per_second_are_ops_times_value_size() {
    let r = result(4096, 2500.0, Vec::new());
    assert!((r.mb_per_s() - 10.24).abs() < 1e-9);
    assert_eq!(result(16, 0.0, Vec::new()).mb_per_s(), 0.0);
    assert_eq!(r.get_rate(), 150.0);
    assert_eq!(r.put_rate(), 50.0);
    assert!(!r.dedicated && r.replica_cpu.is_none());
}

#[test]
fn put_shares_are_fractions_of_the_total_in_server_order() {
    let r = result(4096, 1.0, vec![30, 10, 40, 20]);
    assert_eq!(r.put_shares(), [0.3, 0.1, 0.4, 0.2]);
    assert_eq!(shares_cell(&r.put_shares()), "30/10/40/20");
    assert!(result(4096, 1.0, vec![0, 0]).put_shares().is_empty());
    assert_eq!(shares_cell(&[]), "-");
}

#[test]
fn figures_against_n_are_drawn_when_a_workload_has_several_n() {
    let mut rs = Vec::new();
    for target in ["ring", "abd"] {
        for n in [2, 4, 8] {
            let mut r = result(4096, 1000.0, (1..=n as u64).collect());
            r.target = target.into();
            r.replicas = n;
            r.get_fraction = 0.0;
            r.put.p50_us = 1000 * n as u64;
            rs.push(r);
        }
    }
    // Measured at one N only: no figure vs N.
    let mut lone = result(4096, 1000.0, Vec::new());
    lone.get_fraction = 1.0;
    rs.push(lone);
    let dir = tempfile::tempdir().unwrap();
    let files = quorumkv_bench::plot::write_plots(dir.path(), &rs).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "scaling_throughput_get0_c8_4096B.png",
        "scaling_latency_get0_c8_4096B.png",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
    }
    assert!(!names
        .iter()
        .any(|n| n.contains("scaling") && n.contains("get100")));
    let png = std::fs::read(dir.path().join("scaling_throughput_get0_c8_4096B.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}
