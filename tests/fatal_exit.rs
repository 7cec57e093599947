//! A memory-mode cluster of a protocol that cannot rebuild itself from
//! nothing (Lamport's mutex, the ring) says so and exits after every replica
//! was killed at once, instead of answering "recovering" for ever.
mod common;

use common::binary;
use quorumkv_node::local::{LocalCluster, LocalClusterConfig};
use quorumkv_node::storage::Durability;
use std::time::Duration;

async fn kill_all_then_restart(protocol: &str) {
    let cfg = LocalClusterConfig {
        protocol: protocol.parse().expect("registered"),
        replicas: 3,
        binary: binary(),
        ready_timeout: Duration::from_secs(60),
        durability: Durability::Memory,
        ..Default::default()
    };
    let mut cluster = LocalCluster::start(cfg).await.expect("cluster starts");
    let log_dir = cluster.dir().to_path_buf();
    for id in 1..=3 {
        cluster.kill(id).await.expect("kill");
    }
    // Each comes back with `--recover`; a replica may already have given up
    // while the last one starts, which is the outcome under test too.
    let mut early = Vec::new();
    for id in 1..=3 {
        if let Err(e) = cluster.restart(id).await {
            early.push(format!("{e:#}"));
        }
    }
    let mut exits = early.len();
    while exits < 3 {
        let Ok((id, status)) =
            tokio::time::timeout(Duration::from_secs(60), cluster.wait_any_exit()).await
        else {
            let logs: Vec<String> = (1..=3)
                .map(|id| std::fs::read_to_string(log_dir.join(format!("replica-{id}.log"))))
                .map(|l| l.unwrap_or_default())
                .collect();
            panic!("{protocol}: replicas still running 60 s after a total loss; logs:\n{logs:#?}");
        };
        let status = status.expect("exit status");
        assert!(
            !status.success(),
            "{protocol}: replica {id} exited with {status}"
        );
        exits += 1;
    }
    for id in 1..=3 {
        let log =
            std::fs::read_to_string(log_dir.join(format!("replica-{id}.log"))).unwrap_or_default();
        assert!(
            log.contains("cannot go on"),
            "{protocol}: replica {id} exited without saying why; early errors {early:?}; log:\n{log}"
        );
    }
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lamport_memory_cluster_exits_after_a_total_loss() {
    kill_all_then_restart("lamport").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_memory_cluster_exits_after_a_total_loss() {
    kill_all_then_restart("ring").await;
}
