//! ZooKeeper's extended node types and the requests of 3.6+ that name a
//! session or connection, with the Java ZooKeeper client
//! (`tests/zk/ExtendedTypes.java`): TTL nodes (created, deleted once
//! expired, kept while they have a child), a container's and a TTL node's
//! creates in a multi, `getEphemerals` and `whoAmI`. The same program runs
//! against ZooKeeper 3.8 itself, started with extended types enabled
//! (without them it refuses TTL nodes) and a short container check
//! interval, so the answers asserted are ZooKeeper's.

mod common;

use common::cluster_cfg;
use common::java::{self, Classes};
use common::zookeeper::{require, zookeeper_installed, ZooKeeper};
use quorumkv_node::local::LocalCluster;
use std::time::Duration;

/// The Java client's jars (Debian's zookeeper package and its slf4j).
const JARS: [&str; 4] = [
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "slf4j-simple.jar",
];

/// Checks the program prints on success.
const CHECKS: usize = 7;

fn compile(tag: &str) -> Option<Classes> {
    java::compile("ExtendedTypes", tag, &JARS)
}

async fn run(classes: &Classes, hosts: &str) -> String {
    java::run(
        classes,
        "ExtendedTypes",
        &[hosts],
        CHECKS,
        Duration::from_secs(120),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_nodes_multi_get_ephemerals_and_who_am_i_on_the_zk_port() {
    let Some(classes) = compile("qkv") else {
        return;
    };
    // The leader looks for expired TTL nodes every 100 ms (ZooKeeper below
    // is given the same interval).
    let cfg = cluster_cfg(
        "zab",
        3,
        &["--opt", "ttl-check=100ms", "--opt", "container-grace=100ms"],
    );
    let cluster = LocalCluster::start(cfg)
        .await
        .expect("local cluster starts");
    let hosts: Vec<String> = (cluster.endpoints().iter())
        .map(|e| e.zk.expect("a zab cluster has ZooKeeper ports").to_string())
        .collect();
    let out = run(&classes, &hosts.join(",")).await;
    // quorumkv lists no `ip` identity (it has no such ACL scheme).
    assert!(out.contains("ok whoAmI [] then [digest:alice]"), "{out}");
}

/// The program passes against ZooKeeper itself: what it checks is
/// ZooKeeper's behaviour, not ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_program_passes_against_zookeeper_itself() {
    if !require("ZooKeeper (Debian zookeeper)", zookeeper_installed()) {
        return;
    }
    let Some(classes) = compile("zk") else {
        return;
    };
    let flags = "-Dzookeeper.extendedTypesEnabled=true -Dznode.container.checkIntervalMs=100";
    let zk = ZooKeeper::start_with("extended", flags);
    let out = run(&classes, &zk.hosts).await;
    assert!(out.contains("ok whoAmI [ip:127.0.0.1] then"), "{out}");
}
