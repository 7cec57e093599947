//! No option is silently ignored (issue 32 item 3): a server flag or a
//! client flag that the protocol would not honour is an error at start
//! naming what it supports, for every protocol.

mod common;

use common::{binary, qkv};
use quorumkv_core::protocol::ProtocolKind;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A fresh directory for this test's replicas, removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("qkv-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A name no other call in this process returns (a free port is not one:
/// the OS hands the same port out again once it is released).
fn unique(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}-{n}")
}

/// What became of a one-replica `quorumkv server`.
enum Started {
    /// It answers `endpoints status` at this address.
    Serving(Child, String),
    /// It exited, saying this on stderr.
    Refused(String),
}

/// Start a one-replica server of `protocol` with `extra` flags; wait until
/// it serves or exits.
fn server(protocol: ProtocolKind, extra: &[&str], dir: &std::path::Path) -> Started {
    let addr = format!("127.0.0.1:{}", free_port());
    let log = dir.join(format!("{}.log", unique(protocol.name())));
    let mut child = Command::new(binary())
        .args(["server", "--id", "1", "--listen", &addr])
        .args(["--protocol", protocol.name()])
        .args(extra)
        .env_remove("QUORUMKV_DURABILITY")
        .env_remove("QUORUMKV_DATA_DIR")
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(
                !status.success(),
                "{protocol}: a server only stops when told"
            );
            return Started::Refused(std::fs::read_to_string(&log).unwrap());
        }
        let status = qkv(&["endpoints", "status", "-e", &addr, "--timeout", "1s"]);
        if status.status.success() {
            return Started::Serving(child, addr);
        }
        assert!(
            Instant::now() < until,
            "{protocol}: neither serves nor exits"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn stop(mut child: Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A durable mode starts a protocol that keeps its state on disk, and is
/// refused, naming memory, by one that keeps none (it used to start with a
/// warning and serve from an empty state after a restart). Without
/// `--durability`, each starts in the most durable mode it supports.
#[test]
fn a_durability_the_protocol_cannot_keep_is_refused() {
    let dir = TempDir::new("durability");
    for protocol in ProtocolKind::all() {
        let persists = protocol.info().persists_state;
        for durable in ["fsync", "buffered"] {
            let data = unique("data");
            let flags = ["--durability", durable, "--data-dir", &data];
            match (server(protocol, &flags, dir.path()), persists) {
                (Started::Serving(child, _), true) => stop(child),
                (Started::Refused(log), false) => {
                    assert!(
                        log.contains(&format!("protocol {protocol} keeps no state on disk"))
                            && log.contains("durability memory only"),
                        "{protocol}: {log}"
                    );
                }
                (Started::Serving(child, _), false) => {
                    stop(child);
                    panic!("{protocol} started with durability {durable}, which it cannot keep");
                }
                (Started::Refused(log), true) => panic!("{protocol} {durable}: {log}"),
            }
        }
        let data = unique("data");
        match server(protocol, &["--data-dir", &data], dir.path()) {
            Started::Serving(child, _) => stop(child),
            Started::Refused(log) => panic!("{protocol}, default durability: {log}"),
        }
    }
}

/// An option of another protocol (`--opt`) is refused by a replica,
/// naming the options it has.
#[test]
fn another_protocols_option_is_refused_naming_the_known_ones() {
    let dir = TempDir::new("opt");
    let all = ProtocolKind::all();
    for protocol in &all {
        let own: Vec<&str> = protocol.info().options.iter().map(|o| o.name).collect();
        let Some(foreign) = (all.iter().flat_map(|p| p.info().options))
            .map(|o| o.name)
            .find(|n| !own.contains(n))
        else {
            continue;
        };
        let opt = format!("{foreign}=1");
        let flags = ["--durability", "memory", "--opt", &opt];
        let Started::Refused(log) = server(*protocol, &flags, dir.path()) else {
            panic!("{protocol} started with --opt {opt}");
        };
        assert!(
            log.contains(&format!("unknown option '{foreign}'")),
            "{log}"
        );
        let names = match own.first() {
            Some(first) => log.contains("known:") && log.contains(first),
            None => log.contains("this protocol has no options"),
        };
        assert!(names, "{protocol}: names what it supports: {log}");
    }
}

/// `--opt` and an explicit `--mode direct` need a client-side coordinator:
/// an error with `--mode proxy` or a protocol without one, never ignored.
#[test]
fn client_flags_that_need_a_client_coordinator_are_refused_without_one() {
    let proxy = qkv(&[
        "get",
        "k",
        "--mode",
        "proxy",
        "--opt",
        "a=1",
        "-e",
        "127.0.0.1:1",
    ]);
    let err = String::from_utf8_lossy(&proxy.stderr);
    assert_eq!(proxy.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--opt") && err.contains("--mode proxy"),
        "{err}"
    );
    let dir = TempDir::new("client");
    for protocol in ProtocolKind::all() {
        let Started::Serving(child, addr) =
            server(protocol, &["--durability", "memory"], dir.path())
        else {
            panic!("{protocol} does not start");
        };
        let direct = qkv(&["put", "k", "v", "--mode", "direct", "-e", &addr]);
        let err = String::from_utf8_lossy(&direct.stderr).into_owned();
        if protocol.has_client_coordinator() {
            assert!(direct.status.success(), "{protocol}: {err}");
        } else {
            assert_eq!(direct.status.code(), Some(2), "{protocol}: {err}");
            let says = format!("protocol {protocol} has no client-side coordinator");
            assert!(
                err.contains("--mode direct") && err.contains(&says),
                "{err}"
            );
            let opt = qkv(&["get", "k", "--opt", "x=1", "-e", &addr]);
            let err = String::from_utf8_lossy(&opt.stderr);
            assert_eq!(opt.status.code(), Some(2), "{protocol}: {err}");
            assert!(err.contains("--opt") && err.contains(&says), "{err}");
            // Unasked, the client goes through the server without a word.
            let plain = qkv(&["get", "k", "-e", &addr]);
            assert_eq!(plain.status.code(), Some(1), "(nil): {plain:?}");
        }
        stop(child);
    }
}
