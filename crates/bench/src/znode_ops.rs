//! `--workload znode`: the latency of each basic znode operation, called
//! synchronously (each awaited before the next) and asynchronously (all
//! issued at once on one session, then all awaited), as seed 001 §IV.A
//! measures ZooKeeper with zk-smoketest (Fig. 7; with `--ops create` over
//! `--rtt-client` × `--rtt-peer`, Fig. 8 and 9).
//!
//! The asynchronous figure is zk-smoketest's: the batch's elapsed time
//! divided by its size, i.e. the inverse of the throughput one session
//! reaches when it keeps every request in flight. Operations run in the
//! order create, set, get, exists, children, delete, each over the same
//! `--count` nodes (persistent, 100 bytes), so every call succeeds.

use std::time::Duration;

use bytes::Bytes;
use quorumkv_node::client::ClientConfig;
use quorumkv_node::zk::{CreateMode, ZkClient};
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::config::BenchConfig;
#[cfg(feature = "zookeeper")]
use crate::config::DeploySpec;
pub use crate::config::{ZnodeOpKind, ZnodeOpsConfig};
use crate::lock::LockLatency;
use crate::sweep::{each_deployment, finish};
use crate::target::Deployment;

/// Each node's data (zk-smoketest's default size is 25 bytes; 100 is a
/// small configuration value).
const DATA: [u8; 100] = [b'x'; 100];

/// A session both services' clients give: the six calls, every one to
/// succeed here (an error is reported, not retried).
pub trait ZnodeCalls: Clone + Send + Sync + 'static {
    fn call(
        &self,
        op: ZnodeOpKind,
        path: &str,
    ) -> impl std::future::Future<Output = Result<(), String>> + Send;
}

impl ZnodeCalls for ZkClient {
    async fn call(&self, op: ZnodeOpKind, path: &str) -> Result<(), String> {
        let data = Bytes::from_static(&DATA);
        let r = match op {
            ZnodeOpKind::Create => self
                .create(path, data, CreateMode::PERSISTENT)
                .await
                .map(drop),
            ZnodeOpKind::Set => self.set_data(path, data, None).await.map(drop),
            ZnodeOpKind::Get => self.get_data(path, false).await.map(drop),
            ZnodeOpKind::Exists => self.exists(path, false).await.map(drop),
            ZnodeOpKind::Children => self.children(path, false).await.map(drop),
            ZnodeOpKind::Delete => self.delete(path, None).await,
        };
        r.map_err(|e| e.to_string())
    }
}

#[cfg(feature = "zookeeper")]
impl ZnodeCalls for crate::zk::ZkLockSession {
    async fn call(&self, op: ZnodeOpKind, path: &str) -> Result<(), String> {
        self.znode_call(op, path).await
    }
}

/// One operation in one mode on one target.
#[derive(Clone, Debug, Serialize)]
pub struct OpsResult {
    pub target: String,
    pub replicas: usize,
    pub rtt_client_ms: u64,
    pub rtt_peer_ms: u64,
    pub op: ZnodeOpKind,
    /// `sync` or `async`.
    pub mode: &'static str,
    pub count: usize,
    /// Elapsed time of the batch over its size (sync: the mean latency).
    pub per_op_ms: f64,
    pub ops_per_s: f64,
    /// Each call's own latency, from its issue to its answer.
    pub latency: LockLatency,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// `count` calls of `op` on `dir/n-0 … dir/n-{count-1}`: awaited one by one
/// (`pipelined` false) or all issued at once.
async fn batch<C: ZnodeCalls>(
    c: &C,
    op: ZnodeOpKind,
    dir: &str,
    count: usize,
    pipelined: bool,
) -> (Duration, Vec<Duration>, Vec<String>) {
    // `children` lists each node's own (none, as a lock node has).
    let path = |i: usize| format!("{dir}/n-{i}");
    let start = Instant::now();
    let (mut took, mut errors) = (Vec::with_capacity(count), Vec::new());
    if pipelined {
        let mut set = JoinSet::new();
        for i in 0..count {
            let (c, p) = (c.clone(), path(i));
            set.spawn(async move {
                let t = Instant::now();
                (c.call(op, &p).await, t.elapsed())
            });
        }
        while let Some(done) = set.join_next().await {
            match done {
                Ok((r, t)) => {
                    took.push(t);
                    errors.extend(r.err());
                }
                Err(e) => errors.push(format!("task: {e}")),
            }
        }
    } else {
        for i in 0..count {
            let t = Instant::now();
            let r = c.call(op, &path(i)).await;
            took.push(t.elapsed());
            errors.extend(r.err());
        }
    }
    (start.elapsed(), took, errors)
}

/// Every operation, sync then async, on `c` (a fresh directory per mode).
async fn measure<C: ZnodeCalls>(
    cfg: &BenchConfig,
    d: &Deployment,
    c: &C,
    tag: &str,
) -> Result<Vec<OpsResult>, String> {
    let ops = &cfg.znode_ops;
    let mut out = Vec::new();
    for (mode, pipelined) in [("sync", false), ("async", true)] {
        let dir = format!("/qkv-ops-{tag}-{mode}");
        c.call(ZnodeOpKind::Create, &dir)
            .await
            .map_err(|e| format!("{}: cannot create {dir}: {e}", d.spec.label()))?;
        for &op in &ops.ops {
            eprintln!(
                "quorumkv bench: {} N={} {mode} {op} ×{} …",
                d.spec.label(),
                d.replicas,
                ops.count
            );
            let (elapsed, took, errors) = batch(c, op, &dir, ops.count, pipelined).await;
            let secs = elapsed.as_secs_f64();
            out.push(OpsResult {
                target: d.spec.label(),
                replicas: d.replicas,
                rtt_client_ms: cfg.rtt.client.as_millis() as u64,
                rtt_peer_ms: cfg.rtt.peer.as_millis() as u64,
                op,
                mode,
                count: ops.count,
                per_op_ms: secs * 1e3 / ops.count.max(1) as f64,
                ops_per_s: ops.count as f64 / secs.max(1e-9),
                latency: LockLatency::of(&took),
                errors: errors.len() as u64,
                first_error: errors.into_iter().next(),
            });
            if crate::runner::interrupted() {
                return Ok(out);
            }
        }
    }
    Ok(out)
}

/// One session with the deployment (ours: pinned to its first server; a
/// ZooKeeper target: its first host), and the run.
async fn run_on(cfg: &BenchConfig, d: &Deployment, tag: &str) -> Result<Vec<OpsResult>, String> {
    let label = d.spec.label();
    #[cfg(feature = "zookeeper")]
    if let DeploySpec::Zookeeper { endpoints, .. } = &d.spec {
        let zk = crate::zk::ZkLockSession::connect(&endpoints[0], Duration::from_secs(10))
            .await
            .map_err(|e| format!("{label}: {e:#}"))?;
        return measure(cfg, d, &zk, tag).await;
    }
    let endpoints = d.native_endpoints().to_vec();
    if endpoints.is_empty() {
        return Err(format!(
            "{label}: the znode workload needs a quorumkv or ZooKeeper target (local, quorumkv://, zk://)"
        ));
    }
    let ccfg = ClientConfig {
        op_timeout: cfg.op_timeout,
        tls: d.client_tls(),
        ..Default::default()
    };
    let zk = ZkClient::connect(endpoints, ccfg, Duration::from_secs(10))
        .await
        .map_err(|e| {
            format!("{label}: cannot open a session: {e} (the znode workload needs a protocol that serves znodes)")
        })?;
    let r = measure(cfg, d, &zk, tag).await;
    let _ = zk.close().await;
    r
}

/// The znode-operation sweep. Exit 0 = done and no call failed; 1 = a call
/// failed or the run ended early; 2 = nothing could start.
pub fn run(cfg: &BenchConfig, rt: &tokio::runtime::Runtime) -> std::process::ExitCode {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let sweep = each_deployment(cfg, async |d: &Deployment, results: &mut Vec<OpsResult>| {
        let tag = format!("{ms}-{}", results.len());
        results.extend(run_on(cfg, d, &tag).await?);
        Ok(())
    });
    let write =
        |dir: &std::path::Path, results: &[OpsResult], _incomplete: bool| match std::fs::write(
            dir.join("znode.csv"),
            to_csv(results),
        ) {
            Ok(()) => Ok(format!("wrote znode.csv to {}/", dir.display())),
            Err(e) => Err(format!("cannot write {}/znode.csv: {e}", dir.display())),
        };
    let failed = |results: &[OpsResult]| {
        let failed: Vec<&OpsResult> = results.iter().filter(|r| r.errors > 0).collect();
        for r in &failed {
            eprintln!(
                "quorumkv bench: {} {} {}: {} of {} calls failed; first: {}",
                r.target,
                r.mode,
                r.op,
                r.errors,
                r.count,
                r.first_error.as_deref().unwrap_or("-")
            );
        }
        !failed.is_empty()
    };
    finish(cfg, rt.block_on(sweep), table, write, failed)
}

const CSV_HEADER: &str = "target,replicas,rtt_client_ms,rtt_peer_ms,op,mode,count,per_op_ms,\
ops_per_s,mean_ms,p50_ms,p90_ms,p99_ms,max_ms,errors";

pub fn to_csv(results: &[OpsResult]) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    for r in results {
        let l = &r.latency;
        out += &format!(
            "{},{},{},{},{},{},{},{:.4},{:.1},{:.4},{:.4},{:.4},{:.4},{:.4},{}\n",
            r.target,
            r.replicas,
            r.rtt_client_ms,
            r.rtt_peer_ms,
            r.op,
            r.mode,
            r.count,
            r.per_op_ms,
            r.ops_per_s,
            l.mean_ms,
            l.p50_ms,
            l.p90_ms,
            l.p99_ms,
            l.max_ms,
            r.errors
        );
    }
    out
}

/// One row per target and operation: the sync mean, the async per-op time
/// (elapsed / count), and their ratio (the seed: > 10 for writes, ≈ 2 for
/// reads on ZooKeeper).
pub fn table(results: &[OpsResult]) -> String {
    let mut s = format!(
        "{:<16} {:>2} {:<9} {:>10} {:>10} {:>12} {:>10} {:>7}\n",
        "target", "N", "op", "sync ms", "sync p99", "async ms/op", "async op/s", "ratio"
    );
    for r in results.iter().filter(|r| r.mode == "sync") {
        let a = results
            .iter()
            .find(|a| a.mode == "async" && a.target == r.target && a.op == r.op);
        let (ams, aops, ratio) = match a {
            Some(a) => (
                format!("{:.3}", a.per_op_ms),
                format!("{:.0}", a.ops_per_s),
                format!("{:.1}", r.per_op_ms / a.per_op_ms.max(1e-9)),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        s += &format!(
            "{:<16} {:>2} {:<9} {:>10.3} {:>10.3} {:>12} {:>10} {:>7}\n",
            r.target,
            r.replicas,
            r.op.name(),
            r.per_op_ms,
            r.latency.p99_ms,
            ams,
            aops,
            ratio
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_parse_by_name() {
        assert_eq!("children".parse(), Ok(ZnodeOpKind::Children));
        assert!("put"
            .parse::<ZnodeOpKind>()
            .unwrap_err()
            .contains("create, set"));
    }
}
