//! A Jepsen-style run through a client nobody here wrote: kazoo
//! (tests/zk/kazoo_jepsen.py) drives creates, sets, reads, sequential
//! creates and lock holds on a three-replica zab cluster (fsync) while
//! single replicas are killed and restarted, or paused and resumed; then
//! `quorumkv check`, the binary as a user runs it, judges the recorded
//! history with the znode model and the lock check. A hand-edited copy of
//! the history (a read of data never written; two holders at once) must
//! be refused.

mod common;

use common::{binary, cluster_cfg};
use quorumkv_node::local::{LocalCluster, LocalClusterConfig};
use quorumkv_node::storage::Durability;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long kazoo's clients run.
const SECONDS: u64 = 16;

/// One fault: at `at` into the run, replica `id` is killed (and restarted
/// `for_` later) or paused (and resumed `for_` later).
struct Fault {
    at: Duration,
    id: u32,
    kill: bool,
    for_: Duration,
}

const fn fault(at_ms: u64, id: u32, kill: bool, for_ms: u64) -> Fault {
    Fault {
        at: Duration::from_millis(at_ms),
        id,
        kill,
        for_: Duration::from_millis(for_ms),
    }
}

/// Never more than one replica down: each fault ends before the next.
const SCHEDULE: [Fault; 5] = [
    fault(2_000, 1, false, 2_000),
    fault(5_000, 2, true, 1_000),
    fault(8_000, 3, false, 2_500),
    fault(11_500, 1, true, 500),
    fault(13_500, 2, false, 1_500),
];

/// Debian's Python with kazoo, or a skip (a failure in CI).
fn python_with_kazoo() -> Option<&'static str> {
    let found = ["/usr/bin/python3", "python3"].into_iter().find(|py| {
        let out = Command::new(py).args(["-c", "import kazoo"]).output();
        out.is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "kazoo is required in CI (scripts/deps.sh installs python3-kazoo)"
        );
        eprintln!("SKIPPED: kazoo not installed");
    }
    found
}

/// Run the schedule against `cluster`; how many kills and pauses.
async fn nemesis(cluster: &mut LocalCluster, started: Instant) -> (u32, u32) {
    let (mut kills, mut pauses) = (0, 0);
    for f in &SCHEDULE {
        tokio::time::sleep_until((started + f.at).into()).await;
        if f.kill {
            cluster.kill(f.id).await.expect("kill");
            tokio::time::sleep(f.for_).await;
            cluster.restart(f.id).await.expect("restart");
            kills += 1;
        } else {
            cluster.pause(f.id).expect("pause");
            tokio::time::sleep(f.for_).await;
            cluster.resume(f.id).expect("resume");
            pauses += 1;
        }
    }
    (kills, pauses)
}

/// `quorumkv check FILE`: exit code and stdout.
fn check(file: &Path) -> (i32, String) {
    let out = Command::new(binary())
        .args(["check", "--timeout", "40s"])
        .arg(file)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

/// The count `name` from the script's last line (`{"ok": 12, ...}`).
fn count(summary: &str, name: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(summary).expect("a JSON summary");
    v[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in {summary}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_under_kills_and_pauses_is_linearizable_and_its_locks_hold() {
    let Some(py) = python_with_kazoo() else {
        return;
    };
    let cfg = LocalClusterConfig {
        durability: Durability::Fsync,
        ..cluster_cfg("zab", 3, &[])
    };
    let mut cluster = LocalCluster::start(cfg).await.expect("cluster starts");
    let hosts: Vec<String> = (cluster.endpoints().iter())
        .map(|e| e.zk.expect("a zab cluster has ZooKeeper ports").to_string())
        .collect();
    let history = cluster.dir().join("kazoo-history.jsonl");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/zk/kazoo_jepsen.py");
    let run = tokio::process::Command::new(py)
        .arg(script)
        .arg(hosts.join(","))
        .arg(&history)
        .arg(SECONDS.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the kazoo script starts");
    let (kills, pauses) = nemesis(&mut cluster, Instant::now()).await;
    let out = tokio::time::timeout(Duration::from_secs(SECONDS + 60), run.wait_with_output())
        .await
        .expect("the kazoo script finishes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kazoo_jepsen.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = stdout.lines().last().unwrap_or_default();
    eprintln!("{kills} kills, {pauses} pauses; kazoo: {summary}");
    assert_eq!((kills, pauses), (2, 3));
    // Not a vacuous history: most operations answered, locks taken.
    assert!(count(summary, "ok") >= 300, "{summary}");
    assert!(count(summary, "holds") >= 20, "{summary}");
    // Sessions outlive every fault (the model has no expiry).
    assert_eq!(count(summary, "lost"), 0, "{summary}");

    let (code, verdict) = check(&history);
    eprintln!("{verdict}");
    if code != 0 {
        // The cluster's directory goes with it: keep a refused history.
        let kept = std::env::temp_dir().join(format!("kazoo-refused-{}.jsonl", std::process::id()));
        let _ = std::fs::copy(&history, &kept);
        eprintln!("history kept in {}", kept.display());
    }
    assert_eq!(code, 0, "quorumkv check refused the history:\n{verdict}");
    assert!(verdict.contains("linearizable\n"), "{verdict}");
    assert!(verdict.contains("verdict: LINEARIZABLE"), "{verdict}");

    let text = std::fs::read_to_string(&history).unwrap();
    for (what, edited) in [
        ("a read of data never written", read_never_written(&text)),
        ("two lock holders at once", holders_overlap(&text)),
    ] {
        let bad = cluster.dir().join("edited.jsonl");
        std::fs::write(&bad, edited).unwrap();
        let (code, verdict) = check(&bad);
        assert_eq!(code, 1, "{what} was not refused:\n{verdict}");
        assert!(verdict.contains("verdict: NOT LINEARIZABLE"), "{verdict}");
    }
    cluster.stop().await;
}

/// The history with its first answered read of data changed to data no
/// operation wrote.
fn read_never_written(text: &str) -> String {
    let mut done = false;
    let lines = text.lines().map(|l| {
        let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
        if !done && v["f"] == "get" && v["type"] == "ok" {
            v["value"][0] = "never-written".into();
            done = true;
        }
        v.to_string() + "\n"
    });
    let out: String = lines.collect();
    assert!(done, "the history has an answered read");
    out
}

/// The history with its first lock holding stretched past the next one's
/// acquisition (neither holder's session expired).
fn holders_overlap(text: &str) -> String {
    let holds: Vec<serde_json::Value> = (text.lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["f"] == "hold")
        .collect();
    let first = holds.iter().min_by_key(|h| h["acquired"].as_u64()).unwrap();
    let later = (holds.iter())
        .filter(|h| h["acquired"].as_u64() > first["acquired"].as_u64())
        .min_by_key(|h| h["acquired"].as_u64())
        .expect("two holds");
    let stretched = later["acquired"].as_u64().unwrap() + 1;
    (text.lines())
        .map(
            |l| match serde_json::from_str::<serde_json::Value>(l).unwrap() == *first {
                true => {
                    let mut v = first.clone();
                    v["released"] = stretched.into();
                    v.to_string() + "\n"
                }
                false => l.to_string() + "\n",
            },
        )
        .collect()
}
