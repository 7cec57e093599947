//! Apache Curator, the Java client most Java projects reach ZooKeeper
//! through, on a zab cluster's `--zk-port`: `tests/zk/CuratorRecipes.java`
//! (an inter-process mutex, a leader latch and a distributed queue, each
//! between two sessions), compiled with `javac` against Debian's jars
//! (`libcurator-recipes-java`), and run against ZooKeeper 3.8 itself too,
//! both with Curator's defaults (the recipes' parents are container nodes).

mod common;

use common::cluster_cfg;
use common::java::{self, Classes};
use common::zookeeper::{require, zookeeper_installed, ZooKeeper};
use quorumkv_node::local::LocalCluster;
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

fn compile(tag: &str) -> Option<Classes> {
    java::compile("CuratorRecipes", tag, &JARS)
}

/// Run the program with `args` (the last the connect string); assert that
/// it passed `checks` checks.
async fn run_recipes(classes: &Classes, args: &[&str], checks: usize) {
    java::run(
        classes,
        "CuratorRecipes",
        args,
        checks,
        Duration::from_secs(240),
    )
    .await;
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
    run_recipes(&classes, &[&hosts], 4).await;
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
    run_recipes(&classes, &[&zk.hosts], 4).await;
}
