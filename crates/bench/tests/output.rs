//! CSV, JSON, table and PNG output.

use std::collections::BTreeMap;

use quorumkv_bench::config::BenchConfig;
use quorumkv_bench::floors::{Floor, Floors, Sample};
use quorumkv_bench::plot::write_plots;
use quorumkv_bench::report::{footnotes, table, to_csv, write_files, PointResult, CSV_HEADER};
use quorumkv_bench::stats::LatencySummary;

fn point(
    target: &str,
    kind: &str,
    replicas: usize,
    clients: usize,
    get: f64,
    tput: f64,
) -> PointResult {
    let lat = |base: u64| LatencySummary {
        count: 100,
        avg_us: base as f64 + 0.5, // exactly representable: JSON round-trips it
        p50_us: base,
        p90_us: base * 2 - 1,
        p95_us: base * 2,
        p99_us: base * 3,
        max_us: base * 10,
    };
    PointResult {
        target: target.into(),
        kind: kind.into(),
        replicas,
        clients,
        connections: "shared: 1 client = 3 TCP, pipelined".into(),
        get_fraction: get,
        keys: 10,
        distribution: "uniform".into(),
        value_size: 16,
        rate: None,
        elapsed_s: 3.0,
        throughput: tput,
        ok_get: 90,
        ok_put: 10,
        failed: 2,
        failures: BTreeMap::from([("timeout".to_string(), 2)]),
        get: lat(200 + clients as u64 * 10),
        put: lat(400 + clients as u64 * 20),
        all: lat(220 + clients as u64 * 12),
        cpu_s_per_kop: (kind == "local").then_some(0.05),
        client_cpu_s_per_kop: Some(0.01),
        check: Some("ok".into()),
        note: None,
        server_puts: Vec::new(),
        dedicated: false,
        replica_cpu: None,
        durability: Some(
            if kind == "redis" {
                "aof-always"
            } else {
                "fsync"
            }
            .into(),
        ),
        syncs_per_s: (kind != "redis").then_some(tput / 10.0),
        records_per_s: (kind != "redis").then_some(tput * 0.3),
        ratios: vec![("acks/commit".into(), 2.0)],
        security: None,
        round: None,
        sync_us_avg: None,
        floors: None,
    }
}

fn sample() -> Vec<PointResult> {
    let mut v = Vec::new();
    for &g in &[0.9, 0.1] {
        for &c in &[1, 4, 16, 32] {
            v.push(point("abd", "local", 3, c, g, 1000.0 * c as f64));
            v.push(point("etcd", "etcd", 3, c, g, 200.0 * c as f64));
            v.push(point("redis", "redis", 1, c, g, 5000.0 * c as f64));
        }
    }
    v
}

#[test]
fn csv_rows_match_the_header() {
    let mut rs = sample();
    rs[0].note = Some("a note, with a comma and \"quotes\"".into());
    let csv = to_csv(&rs);
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some(CSV_HEADER));
    let cols = CSV_HEADER.split(',').count();
    let first = lines.next().unwrap();
    assert!(
        first.starts_with("abd,local,3,1,0.9,10,uniform,16,,3.000,1000.0,90,10,2,timeout=2,"),
        "{first}"
    );
    // The note, then security, vs plain, cpu vs plain, round and the
    // seven floor columns: all empty here.
    assert!(
        first.ends_with(&format!(
            ",\"a note, with a comma and \"\"quotes\"\"\"{}",
            ",".repeat(11)
        )),
        "{first}"
    );
    for line in csv.lines().skip(1) {
        assert_eq!(split_csv(line).len(), cols, "{line}");
    }
    assert_eq!(csv.lines().count(), rs.len() + 1);
}

/// Fields of one CSV line, honouring double quotes.
fn split_csv(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

#[test]
fn json_and_csv_files_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let mut rs = sample();
    rs[0].floors = Some(floors());
    rs[0].sync_us_avg = Some(325.0);
    write_files(dir.path(), &BenchConfig::default(), &rs, false).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("results.json")).unwrap())
            .unwrap();
    assert_eq!(json["incomplete"], false);
    assert_eq!(json["config"]["replicas"], serde_json::json!([3]));
    let back: Vec<PointResult> = serde_json::from_value(json["results"].clone()).unwrap();
    assert_eq!(back, rs);
    assert!(std::fs::read_to_string(dir.path().join("results.csv"))
        .unwrap()
        .starts_with("target,kind,"));
}

#[test]
fn table_has_a_row_per_point_and_the_check_column() {
    let rs = sample();
    let t = table(&rs);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), rs.len() + 2);
    assert!(
        lines[0].starts_with("target") && lines[0].contains("ops/s") && lines[0].ends_with("check")
    );
    assert!(lines[2].starts_with("abd ") && lines[2].ends_with("ok"));
    // Durability differs between targets, and local/etcd report syncs:
    // a disk column, syncs/s and writes per sync (here 0.3 / 0.1 = 3).
    assert!(lines[0].contains("disk") && lines[0].contains("recs/sync"));
    assert!(
        lines[2].contains(" fsync ") && lines[2].contains(" 3.0 "),
        "{}",
        lines[2]
    );
    let redis = lines.iter().find(|l| l.starts_with("redis")).unwrap();
    assert!(redis.contains("aof-always"), "{redis}");
}

#[test]
fn one_durability_everywhere_needs_no_column() {
    let mut rs = sample();
    for r in &mut rs {
        r.durability = Some("memory".into());
        r.syncs_per_s = None;
    }
    let t = table(&rs);
    let head = t.lines().next().unwrap();
    assert!(
        !head.contains("disk") && !head.contains("syncs/s"),
        "{head}"
    );
}

#[test]
fn plots_are_pngs() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_plots(dir.path(), &sample()).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.contains(&"throughput_n3.png".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"latency_n3_get90.png".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"latency_n3_get10.png".to_string()),
        "{names:?}"
    );
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", f.display());
        assert!(
            bytes.len() > 10_000,
            "{} is suspiciously small",
            f.display()
        );
    }
}

#[test]
fn security_settings_get_a_ratio_to_plain_and_cpu_per_op() {
    let mut rs = Vec::new();
    for (sec, tput, cpu) in [("plain", 1000.0, 0.10), ("tls", 850.0, 0.13)] {
        let target = match sec {
            "plain" => "abd".to_string(),
            s => format!("abd/{s}"),
        };
        let mut r = point(&target, "local", 3, 32, 0.9, tput);
        r.security = Some(sec.into());
        r.cpu_s_per_kop = Some(cpu);
        rs.push(r);
    }
    assert_eq!(rs[1].vs_plain(&rs), Some(0.85));
    assert!((rs[1].cpu_vs_plain(&rs).unwrap() - 1.3).abs() < 1e-9);
    assert_eq!(rs[0].vs_plain(&rs), None);
    let t = table(&rs);
    let lines: Vec<&str> = t.lines().collect();
    assert!(
        lines[0].contains("vs plain")
            && lines[0].contains("srv cpu")
            && lines[0].contains("cpu vs plain"),
        "{}",
        lines[0]
    );
    assert!(
        lines[3].starts_with("abd/tls") && lines[3].contains("0.85x"),
        "{t}"
    );
    assert!(lines[3].contains("1.30x"), "{t}");
    assert!(footnotes(&rs).contains("vs plain"));
    let csv = to_csv(&rs);
    let row = split_csv(csv.lines().nth(2).unwrap());
    let at = CSV_HEADER.split(',').position(|c| c == "security").unwrap();
    assert_eq!(&row[at..at + 4], ["tls", "0.850", "1.300", ""]);
}

/// Floors measured beside a run: disk mean 250 µs, round trip p50 20 µs.
fn floors() -> Floors {
    let s = |p50_us, mean_us| Sample {
        p50_us,
        mean_us,
        n: 1000,
    };
    Floors {
        disk: Some(Floor {
            before: s(190.0, 250.0),
            after: Some(s(200.0, 260.0)),
        }),
        disk_dir: "/tmp".into(),
        rtt: Some(Floor {
            before: s(20.0, 22.0),
            after: Some(s(25.0, 27.0)),
        }),
    }
}

#[test]
fn ratios_to_the_floors_in_the_table_the_footer_and_the_csv() {
    let mut rs = sample();
    for r in &mut rs {
        r.floors = Some(floors());
        r.sync_us_avg = (r.kind != "redis").then_some(325.0);
    }
    let abd = &rs[0];
    // GET p50 of one client: 210 µs, over the lower p50 (20 µs).
    assert_eq!(abd.get.p50_us, 210);
    assert_eq!(abd.get_vs_rtt(), Some(10.5));
    // 325 µs over the lower mean (250 µs).
    assert_eq!(abd.sync_vs_disk(), Some(1.3));
    // Redis times no syncs; a buffered replica's sync is not the disk's.
    assert_eq!(rs[2].sync_vs_disk(), None);
    let mut buffered = abd.clone();
    buffered.durability = Some("buffered".into());
    assert_eq!(buffered.sync_vs_disk(), None);

    let t = table(&rs);
    let lines: Vec<&str> = t.lines().collect();
    assert!(
        lines[0].contains("sync/disk") && lines[0].contains("GET/rtt"),
        "{}",
        lines[0]
    );
    assert!(
        lines[2].contains(" 1.30x ") && lines[2].contains(" 10.50x "),
        "{}",
        lines[2]
    );
    let foot = footnotes(&rs);
    assert!(
        foot.contains(
            "floors of this host (before/after the run): disk 2 KB O_DSYNC append in /tmp \
             p50 190/200 us, mean 250/260 us; loopback TCP round trip p50 20/25 us"
        ),
        "{foot}"
    );
    assert!(
        foot.contains("sync/disk = ") && foot.contains("GET/rtt = "),
        "{foot}"
    );

    let csv = to_csv(&rs);
    let head: Vec<&str> = CSV_HEADER.split(',').collect();
    let row = split_csv(csv.lines().nth(1).unwrap());
    let col = |name: &str| row[head.iter().position(|c| *c == name).unwrap()].as_str();
    assert_eq!(col("sync_us_avg"), "325.0");
    assert_eq!(col("disk_floor_p50_us"), "190.0");
    assert_eq!(col("disk_floor_mean_us"), "250.0");
    assert_eq!(col("rtt_floor_p50_us"), "20.0");
    assert_eq!(col("sync_vs_disk"), "1.300");
    assert_eq!(col("get_p50_vs_rtt"), "10.500");

    // Without floors (--no-floors): no columns, no lines.
    let plain = sample();
    assert!(!table(&plain).contains("GET/rtt"));
    assert!(!footnotes(&plain).contains("floors"));
}
