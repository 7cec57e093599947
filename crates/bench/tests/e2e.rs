//! End-to-end: the bench against a local 3-replica cluster (with --check),
//! against Redis when redis-server is installed, and its preflight errors.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use quorumkv_bench::config::{parse_targets, BenchConfig, Length};
use quorumkv_bench::sweep::execute;
use quorumkv_core::protocol::ProtocolKind;

/// The `quorumkv` executable local clusters run: $QUORUMKV_BIN, else the
/// workspace's debug build. `cargo test --workspace` / `nextest --workspace`
/// build it before any test runs; with `-p quorumkv-bench` alone it is built
/// here when missing (never rebuilt while other tests may be running it).
fn quorumkv_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("QUORUMKV_BIN") {
        return PathBuf::from(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let bin = target.join("debug/quorumkv");
    static BUILD: std::sync::Once = std::sync::Once::new();
    BUILD.call_once(|| {
        if !bin.is_file() {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let st = Command::new(cargo)
                .args(["build", "-q", "-p", "quorumkv", "--bin", "quorumkv"])
                .current_dir(&root)
                .status()
                .expect("run cargo build");
            assert!(st.success(), "cargo build -p quorumkv failed");
        }
    });
    bin
}

/// A short run. The op timeout is 10 s, not the default 2 s: lease-lock
/// gives up a lock round after half of it, and CI machines (tests in
/// parallel, fsync on a shared disk) stall for over a second at times —
/// a refused op there says nothing about the bench's wiring, which is
/// what these tests check (CI refused a run on `refused: 2`, a 1.3 s put).
fn tiny(cfg: BenchConfig) -> BenchConfig {
    BenchConfig {
        op_timeout: Duration::from_secs(10),
        clients: vec![1, 4],
        get_fractions: vec![0.5],
        keys: vec![5],
        length: Length::Duration(Duration::from_millis(700)),
        warmup: Duration::from_millis(100),
        progress: false,
        floors: false,
        ..cfg
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_cluster_with_check() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = BenchConfig {
        floors: true,
        ..tiny(BenchConfig {
            replicas: vec![3],
            check: true,
            binary: Some(quorumkv_bin()),
            out: Some(dir.path().to_path_buf()),
            ..Default::default()
        })
    };
    let out = execute(&cfg).await.expect("bench runs");
    assert_eq!(out.incomplete, None);
    // The host's floors, measured before and after the points: positive,
    // finite, and in every point for its ratios.
    let floors = out.floors.as_ref().expect("floors measured");
    for f in [floors.disk.as_ref(), floors.rtt.as_ref()] {
        let f = f.expect("both floors");
        let after = f.after.expect("measured again after the last point");
        for s in [f.before, after] {
            assert!(s.n > 0, "{floors:?}");
            for v in [s.p50_us, s.mean_us] {
                assert!(v.is_finite() && v > 0.0, "{floors:?}");
            }
        }
    }
    assert_eq!(floors.disk_dir, std::env::temp_dir().display().to_string());
    let foot = quorumkv_bench::report::footnotes(&out.results);
    assert!(
        foot.contains("floors of this host (before/after the run): disk 2 KB O_DSYNC append")
            && foot.contains("loopback TCP round trip p50"),
        "{foot}"
    );
    let table = quorumkv_bench::report::table(&out.results);
    assert!(table.lines().next().unwrap().contains("GET/rtt"), "{table}");
    assert_eq!(out.results.len(), 2 * cfg.protocols.len());
    for r in &out.results {
        assert_eq!(r.replicas, 3);
        assert!(r.throughput > 0.0 && r.ok_get > 0 && r.ok_put > 0, "{r:?}");
        assert_eq!(r.failed, 0, "{r:?}");
        assert!(r.get.p50_us > 0 && r.get.p50_us <= r.get.p99_us && r.get.p99_us <= r.get.max_us);
        assert!(r.cpu_s_per_kop.is_some(), "our servers' CPU is measured");
        assert_eq!(r.check.as_deref(), Some("ok"), "verdict column: {r:?}");
        assert!(r.connections.starts_with("shared"), "{}", r.connections);
        // The default is what a server runs: fsync, with syncs counted;
        // a protocol that persists nothing says memory.
        let kind: ProtocolKind = r.target.parse().expect("a protocol's name");
        let expected = if kind.info().persists_state {
            "fsync"
        } else {
            "memory"
        };
        assert_eq!(r.durability.as_deref(), Some(expected), "{r:?}");
        assert_eq!(r.floors.as_ref(), Some(floors));
        assert!(
            r.get_vs_rtt().is_some_and(|x| x.is_finite() && x > 0.0),
            "{r:?}"
        );
        if expected == "fsync" {
            assert!(r.syncs_per_s.is_some_and(|s| s > 0.0), "{r:?}");
            assert!(r.records_per_sync().is_some_and(|x| x >= 1.0), "{r:?}");
            // The replicas time their syncs: a mean, and its ratio to the floor.
            assert!(r.sync_us_avg.is_some_and(|x| x > 0.0), "{r:?}");
            assert!(
                r.sync_vs_disk().is_some_and(|x| x.is_finite() && x > 0.0),
                "{r:?}"
            );
        }
    }
    for f in [
        "results.csv",
        "results.json",
        "throughput_n3.png",
        "latency_n3_get50.png",
    ] {
        assert!(dir.path().join(f).is_file(), "{f} missing");
    }
    let csv = std::fs::read_to_string(dir.path().join("results.csv")).unwrap();
    assert!(csv.lines().skip(1).all(|l| l.contains(",ok,")), "{csv}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_against_a_local_cluster() {
    let cfg = BenchConfig {
        rates: vec![400.0],
        max_outstanding: 8,
        length: Length::OpsPerClient(20),
        ..tiny(BenchConfig {
            binary: Some(quorumkv_bin()),
            out: None,
            ..Default::default()
        })
    };
    let out = execute(&cfg).await.expect("bench runs");
    let r = &out.results[0];
    assert_eq!(r.clients, 8);
    assert_eq!(r.rate, Some(400.0));
    assert_eq!(r.ok_get + r.ok_put + r.failed, 160, "{r:?}");
    // 160 arrivals at 400/s take about 0.4 s.
    assert!((0.2..2.0).contains(&r.elapsed_s), "{r:?}");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A throwaway redis-server, or None (with the reason printed) when absent.
fn redis_server(dir: &std::path::Path) -> Option<(Redis, u16)> {
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("SKIPPED: redis-server is not on PATH (Debian: apt-get install redis-server)");
        return None;
    }
    let port = free_port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    let r = Redis(child);
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some((r, port));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("redis-server did not listen on {port}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_target() {
    let dir = tempfile::tempdir().unwrap();
    let Some((_redis, port)) = redis_server(dir.path()) else {
        return;
    };
    let cfg = tiny(BenchConfig {
        targets: parse_targets(&format!("redis://127.0.0.1:{port}")).unwrap(),
        check: true,
        out: None,
        ..Default::default()
    });
    let out = execute(&cfg).await.expect("bench runs");
    assert_eq!(out.incomplete, None);
    assert_eq!(out.results.len(), 2);
    for r in &out.results {
        assert_eq!(
            (r.target.as_str(), r.kind.as_str(), r.replicas),
            ("redis", "redis", 1)
        );
        assert!(r.throughput > 0.0 && r.failed == 0, "{r:?}");
        assert!(
            r.cpu_s_per_kop.is_some(),
            "a local redis-server is found by its port"
        );
        // A single Redis server is linearizable.
        assert_eq!(r.check.as_deref(), Some("ok"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_dying_mid_run_ends_the_run_with_what_was_measured() {
    let dir = tempfile::tempdir().unwrap();
    let Some((redis, port)) = redis_server(dir.path()) else {
        return;
    };
    let cfg = BenchConfig {
        targets: parse_targets(&format!("redis://127.0.0.1:{port}")).unwrap(),
        clients: vec![2, 4, 8],
        get_fractions: vec![0.5],
        length: Length::Duration(Duration::from_secs(2)),
        warmup: Duration::ZERO,
        op_timeout: Duration::from_millis(300),
        progress: false,
        // The killer's timing assumes the first point starts at once.
        floors: false,
        out: Some(dir.path().join("out")),
        ..Default::default()
    };
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(2800));
        drop(redis);
    });
    let out = execute(&cfg).await.expect("bench starts");
    killer.join().unwrap();
    let why = out.incomplete.expect("the run says it ended early");
    assert!(why.contains("redis"), "{why}");
    assert!(
        !out.results.is_empty() && out.results.len() < 3,
        "{:?}",
        out.results
    );
    assert!(out.results[0].throughput > 0.0 && out.results[0].note.is_none());
    assert!(out.results.last().unwrap().note.is_some());
    let json = std::fs::read_to_string(dir.path().join("out/results.json")).unwrap();
    assert!(json.contains("\"incomplete\": true"));
}

#[tokio::test]
async fn preflight_rejects_before_any_work() {
    // Unreachable target.
    let port = free_port();
    let cfg = BenchConfig {
        targets: parse_targets(&format!("redis://127.0.0.1:{port}")).unwrap(),
        out: None,
        progress: false,
        ..Default::default()
    };
    let e = execute(&cfg).await.expect_err("nothing listens there");
    assert!(e.contains("unreachable") && !e.contains('\n'), "{e}");

    // Unwritable output directory (a path under a regular file).
    let f = tempfile::NamedTempFile::new().unwrap();
    let cfg = BenchConfig {
        out: Some(f.path().join("results")),
        progress: false,
        ..Default::default()
    };
    let e = execute(&cfg)
        .await
        .expect_err("cannot create a directory under a file");
    assert!(e.starts_with("cannot create output directory"), "{e}");

    // Missing executable for local clusters.
    let cfg = BenchConfig {
        binary: Some("/nonexistent/quorumkv".into()),
        out: None,
        ..Default::default()
    };
    let e = execute(&cfg).await.expect_err("no such binary");
    assert!(e.contains("does not exist"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_quorumkv_cluster_in_proxy_mode() {
    use quorumkv_node::local::{LocalCluster, LocalClusterConfig};
    let cluster = LocalCluster::start(LocalClusterConfig {
        replicas: 3,
        binary: quorumkv_bin(),
        ..Default::default()
    })
    .await
    .expect("start a cluster");
    let eps: Vec<String> = cluster
        .endpoints()
        .iter()
        .map(|e| e.native.to_string())
        .collect();
    let cfg = tiny(BenchConfig {
        targets: parse_targets(&format!("quorumkv://{}", eps.join(","))).unwrap(),
        // As `quorumkv bench --target quorumkv://…` without --protocol:
        // the bench asks the cluster.
        protocol_from_target: true,
        coord: quorumkv_bench::config::CoordMode::Proxy,
        clients: vec![4],
        check: true,
        out: None,
        ..Default::default()
    });
    let out = execute(&cfg).await.expect("bench runs");
    cluster.stop().await;
    let r = &out.results[0];
    assert_eq!(
        (r.target.as_str(), r.kind.as_str(), r.replicas),
        ("quorumkv:abd", "quorumkv", 3)
    );
    assert!(r.throughput > 0.0 && r.failed == 0, "{r:?}");
    assert_eq!(r.cpu_s_per_kop, None, "not our children");
    assert_eq!(r.check.as_deref(), Some("ok"));
}

/// A throwaway etcd member; its data directory goes when it does.
struct Etcd {
    child: Child,
    _data: tempfile::TempDir,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_target() {
    if Command::new("etcd").arg("--version").output().is_err() {
        println!("SKIPPED: etcd is not on PATH (Debian: apt-get install etcd-server)");
        return;
    }
    let (client, peer) = (free_port(), free_port());
    let data = tempfile::tempdir().unwrap();
    let child = Command::new("etcd")
        .args(["--name", "m0", "--data-dir"])
        .arg(data.path().join("m0"))
        .args([
            "--listen-client-urls",
            &format!("http://127.0.0.1:{client}"),
        ])
        .args([
            "--advertise-client-urls",
            &format!("http://127.0.0.1:{client}"),
        ])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args([
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
        ])
        .args(["--initial-cluster", &format!("m0=http://127.0.0.1:{peer}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start etcd");
    let _etcd = Etcd { child, _data: data };
    let mut up = false;
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", client)).is_ok() {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(up, "etcd did not listen on {client}");
    let cfg = tiny(BenchConfig {
        targets: parse_targets(&format!("etcd://127.0.0.1:{client}")).unwrap(),
        clients: vec![4],
        check: true,
        op_timeout: Duration::from_secs(5),
        out: None,
        ..Default::default()
    });
    let out = execute(&cfg).await.expect("bench runs");
    let r = &out.results[0];
    assert_eq!(
        (r.target.as_str(), r.kind.as_str(), r.replicas),
        ("etcd", "etcd", 1)
    );
    assert!(r.throughput > 0.0 && r.failed == 0, "{r:?}");
    assert_eq!(
        r.check.as_deref(),
        Some("ok"),
        "etcd's reads are linearizable"
    );
}

/// A throwaway ZooKeeper ensemble run by `scripts/peers.sh`, in its own
/// state directory; stopped (data removed) when dropped.
#[cfg(feature = "zookeeper")]
struct ZooKeeper {
    target: String,
    state: tempfile::TempDir,
}

#[cfg(feature = "zookeeper")]
impl ZooKeeper {
    fn peers() -> Command {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/peers.sh");
        Command::new(script)
    }

    /// `servers` servers on ports from a base that depends on the process,
    /// below the ephemeral range; another base if one is taken.
    fn start(servers: usize) -> ZooKeeper {
        let state = tempfile::tempdir().unwrap();
        let mut last = String::new();
        for attempt in 0..4u32 {
            let base = 21000 + ((std::process::id() + attempt * 97) % 900) * 10;
            let out = Self::peers()
                .args(["start", "zookeeper", "--replicas", &servers.to_string()])
                .args(["--port-base", &base.to_string()])
                .env("QKV_PEERS_DIR", state.path())
                .stdin(Stdio::null())
                .output()
                .expect("run scripts/peers.sh");
            if out.status.success() {
                let target = String::from_utf8(out.stdout).unwrap().trim().to_string();
                return ZooKeeper { target, state };
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
        }
        panic!("peers.sh start zookeeper failed: {last}");
    }
}

#[cfg(feature = "zookeeper")]
impl Drop for ZooKeeper {
    fn drop(&mut self) {
        let _ = Self::peers()
            .args(["stop", "zookeeper"])
            .env("QKV_PEERS_DIR", self.state.path())
            .stderr(Stdio::null())
            .status();
    }
}

/// A real three-server ensemble, read locally and after a sync.
#[cfg(feature = "zookeeper")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_target() {
    let installed = std::path::Path::new("/usr/share/java/zookeeper.jar").is_file()
        && Command::new("java").arg("-version").output().is_ok();
    if !installed {
        println!("SKIPPED: ZooKeeper is not installed (Debian: apt-get install zookeeper)");
        return;
    }
    let zk = ZooKeeper::start(3);
    assert!(zk.target.starts_with("zk://"), "{}", zk.target);
    let synced = zk.target.replacen("zk://", "zk+sync://", 1);
    let cfg = BenchConfig {
        clients: vec![4],
        ..tiny(BenchConfig {
            targets: parse_targets(&format!("{},{synced}", zk.target)).unwrap(),
            check: true,
            op_timeout: Duration::from_secs(5),
            out: None,
            ..Default::default()
        })
    };
    let out = execute(&cfg).await.expect("bench runs");
    assert_eq!(out.incomplete, None);
    let labels: Vec<&str> = out.results.iter().map(|r| r.target.as_str()).collect();
    assert_eq!(labels, ["zookeeper", "zookeeper+sync"]);
    for r in &out.results {
        assert_eq!((r.kind.as_str(), r.replicas), ("zookeeper", 3));
        assert!(r.throughput > 0.0 && r.ok_get > 0 && r.ok_put > 0, "{r:?}");
        assert_eq!(r.failed, 0, "{r:?}");
        // forceSync=yes: the servers' fsync counters move with the writes.
        assert_eq!(r.durability.as_deref(), Some("fsync"));
        assert!(r.syncs_per_s.is_some_and(|s| s > 0.0), "{r:?}");
        assert!(r.cpu_s_per_kop.is_some(), "the servers run on this host");
        assert!(r.connections.contains("session"), "{}", r.connections);
    }
    // Local reads may be stale (sequential consistency): a violation is
    // allowed, and then explained. After a sync, with a stable leader,
    // reads are linearizable.
    let local = &out.results[0];
    match local.check.as_deref() {
        Some("ok") => {}
        Some(v) if v.starts_with("VIOLATION") => {
            let note = local.note.as_deref().unwrap_or_default();
            assert!(note.contains("sequentially consistent"), "{note}");
        }
        other => panic!("local reads' verdict: {other:?}"),
    }
    assert_eq!(
        out.results[1].check.as_deref(),
        Some("ok"),
        "{:?}",
        out.results[1]
    );
}

/// `--security plain,tls,tls+auth`: three clusters of one protocol side by
/// side, the workload measured on each in turn; the logged-in TLS clients
/// work like the plain ones, and each row has its ratio to plain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_settings_side_by_side() {
    use quorumkv_bench::config::Security;
    use quorumkv_node::storage::Durability;
    let mut cfg = tiny(BenchConfig {
        protocols: vec!["abd".parse::<ProtocolKind>().unwrap()],
        securities: vec![Security::Plain, Security::Tls, Security::TlsAuth],
        durabilities: vec![Durability::Memory],
        check: true,
        binary: Some(quorumkv_bin()),
        out: None,
        ..Default::default()
    });
    cfg.clients = vec![4];
    cfg.rounds = 2;
    let out = execute(&cfg).await.expect("bench runs");
    assert_eq!(out.incomplete, None);
    let labels: Vec<&str> = out.results.iter().map(|r| r.target.as_str()).collect();
    let one = ["abd/memory", "abd/memory/tls", "abd/memory/tls+auth"];
    assert_eq!(labels, [one, one].concat());
    let rounds: Vec<Option<usize>> = out.results.iter().map(|r| r.round).collect();
    assert_eq!(
        rounds,
        [Some(1), Some(1), Some(1), Some(2), Some(2), Some(2)]
    );
    // Each round is compared with its own plain point.
    let sibling = out.results[4].plain_sibling(&out.results).unwrap();
    assert_eq!(sibling.round, Some(2));
    for r in &out.results {
        assert!(r.throughput > 0.0 && r.failed == 0, "{r:?}");
        assert_eq!(r.check.as_deref(), Some("ok"), "{r:?}");
        assert!(r.cpu_s_per_kop.is_some());
    }
    assert!(out.results[2].connections.contains("logs in"));
    assert!(out.results[1].connections.contains("TLS 1.3"));
    assert!(out.results[1].vs_plain(&out.results).is_some());
    assert!(out.results[2].cpu_vs_plain(&out.results).is_some());
    let table = quorumkv_bench::report::table(&out.results);
    assert!(table.contains("vs plain"), "{table}");
}
