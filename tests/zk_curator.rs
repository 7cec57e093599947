//! Apache Curator, the Java client most Java projects reach ZooKeeper
//! through, on a zab cluster's `--zk-port`: `tests/zk/CuratorRecipes.java`
//! (an inter-process mutex, a leader latch and a distributed queue, each
//! between two sessions), compiled with `javac` against Debian's jars
//! (`libcurator-recipes-java`), and run against ZooKeeper 3.8 itself too,
//! both with Curator's defaults (the recipes' parents are container nodes).

mod common;

use common::cluster_cfg;
use common::zookeeper::{require, zookeeper_installed, ZooKeeper};
use quorumkv_node::local::LocalCluster;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The jars the program needs, from Debian's packages (curator-* from
/// libcurator-*-java, which pull in guava; zookeeper* and slf4j from
/// zookeeper's dependencies).
/// slf4j-simple logs the clients' warnings to stderr, which a failure shows.
const JARS: [&str; 8] = [
    "curator-recipes.jar",
    "curator-framework.jar",
    "curator-client.jar",
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "guava.jar",
    "slf4j-api.jar",
    "slf4j-simple.jar",
];
const JAVA_DIR: &str = "/usr/share/java";

/// The jars in `JAVA_DIR` that are missing.
fn missing_jars() -> Vec<&'static str> {
    (JARS.into_iter())
        .filter(|j| !Path::new(JAVA_DIR).join(j).is_file())
        .collect()
}

fn has_javac() -> bool {
    Command::new("javac")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The compiled program: its class directory (removed when dropped) and
/// the classpath to run it with (that directory, then the jars).
struct Classes {
    dir: PathBuf,
    classpath: String,
}

impl Drop for Classes {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Compile the program into a fresh directory named by `tag`. `None` when
/// javac or a jar is missing (skipped, or failed in CI).
fn compile(tag: &str) -> Option<Classes> {
    let missing = missing_jars();
    let what = format!("javac and Curator's jars (missing: {missing:?})");
    if !require(&what, missing.is_empty() && has_javac()) {
        return None;
    }
    let dir = std::env::temp_dir().join(format!("qkv-curator-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let jars: Vec<PathBuf> = JARS.iter().map(|j| Path::new(JAVA_DIR).join(j)).collect();
    let mut classpath = vec![dir.clone()];
    classpath.extend(jars);
    let classpath = std::env::join_paths(classpath).unwrap();
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/zk/CuratorRecipes.java");
    let out = Command::new("javac")
        .arg("-d")
        .arg(&dir)
        .arg("-cp")
        .arg(&classpath)
        .arg(source)
        .output()
        .expect("javac runs");
    assert!(
        out.status.success(),
        "javac failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let classpath = classpath.into_string().unwrap();
    Some(Classes { dir, classpath })
}

/// Run the program with `args` (the last the connect string); assert that
/// it passed `checks` checks.
async fn run_recipes(classpath: &str, args: &[&str], checks: usize) {
    let hosts = args.last().unwrap();
    let run = tokio::process::Command::new("java")
        .args(["-cp", classpath, "CuratorRecipes"])
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("CuratorRecipes finishes in 240 s")
        .expect("java runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("\nall ok\n"),
        "CuratorRecipes against {hosts} failed:\n{stdout}\n{stderr}"
    );
    let oks: Vec<&str> = stdout.lines().filter(|l| l.starts_with("ok ")).collect();
    assert_eq!(oks.len(), checks, "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_mutex_leader_latch_and_queue_on_the_zk_port() {
    let Some(classes) = compile("qkv") else {
        return;
    };
    let cluster = LocalCluster::start(cluster_cfg("zab", 3, &[]))
        .await
        .expect("local cluster starts");
    let hosts: Vec<String> = (cluster.endpoints().iter())
        .map(|e| e.zk.expect("a zab cluster has ZooKeeper ports").to_string())
        .collect();
    let hosts = hosts.join(",");
    run_recipes(&classes.classpath, &[&hosts], 4).await;
}

/// The program passes against real ZooKeeper too: what it checks is
/// ZooKeeper's behaviour, not ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_recipes_pass_against_zookeeper_itself() {
    if !require("ZooKeeper (Debian zookeeper)", zookeeper_installed()) {
        return;
    }
    let Some(classes) = compile("zk") else {
        return;
    };
    let zk = ZooKeeper::start("curator");
    run_recipes(&classes.classpath, &[&zk.hosts], 4).await;
}
