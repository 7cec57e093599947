//! Rolling restarts by SIGTERM on real 3-replica clusters (ABD and Zab)
//! under a steady client load: every replica in turn drains, exits 0 within
//! its drain timeout and comes back, while clients record a history. Then
//! the history must be linearizable, no operation may have failed with a
//! definite answer, and every acknowledged write must be read back.

mod common;

use quorumkv_check::history::{Op, Outcome};
use quorumkv_check::recorder::Recorder;
use quorumkv_check::{check, Model, Verdict};
use quorumkv_core::NodeId;
use quorumkv_node::client::{Client, ClientError, ClientMode};
use quorumkv_node::local::{LocalCluster, LocalClusterConfig};
use quorumkv_node::status;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Each replica's `--drain-timeout`: it must exit within it.
const DRAIN: Duration = Duration::from_secs(5);
/// Client operations may span an election (Zab) or a restart.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// Shared keys (the linearizability check is per key).
const KEYS: u64 = 4;

/// What the load saw, besides the history.
#[derive(Default)]
struct Seen {
    /// Unique keys whose write was acknowledged, with their value.
    acked: Mutex<Vec<(String, String)>>,
    /// Operations that failed with a definite answer.
    definite: Mutex<Vec<String>>,
    done: AtomicU64,
}

fn record_error(seen: &Seen, what: &str, e: &ClientError) -> Outcome {
    if e.is_definite() {
        seen.definite.lock().unwrap().push(format!("{what}: {e}"));
        Outcome::Fail
    } else {
        Outcome::Unknown
    }
}

/// One client's steady load until `stop`: puts and gets on the shared
/// keys, and every third operation a write of a key of its own.
async fn load(c: Client, id: u64, rec: Arc<Recorder>, seen: Arc<Seen>, stop: Arc<AtomicBool>) {
    let mut log = rec.client(id);
    let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ id;
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let own = i.is_multiple_of(3);
        let (key, value) = match own {
            true => (format!("own-{id}-{i}"), format!("v{id}-{i}")),
            false => (format!("k{}", x % KEYS), format!("c{id}-{i}")),
        };
        if own || x.is_multiple_of(2) {
            let h = log.invoke(Op::Put {
                key: key.clone(),
                value: value.clone(),
            });
            let o = match c.put(key.clone(), value.clone()).await {
                Ok(()) => {
                    if own {
                        seen.acked.lock().unwrap().push((key, value));
                    }
                    Outcome::Ok(None)
                }
                Err(e) => record_error(&seen, &format!("put {key}"), &e),
            };
            log.complete(h, o);
        } else {
            let h = log.invoke(Op::Get { key: key.clone() });
            let o = match c.get(key.clone()).await {
                Ok(v) => Outcome::Ok(v.map(|b| String::from_utf8_lossy(&b).into_owned())),
                Err(e) => record_error(&seen, &format!("get {key}"), &e),
            };
            log.complete(h, o);
        }
        seen.done.fetch_add(1, Ordering::Relaxed);
        // A steady, not a flooding, load: the history stays checkable.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    log.finish();
}

/// Wait (up to 20 s) until the load has completed `more` operations.
async fn progress(seen: &Seen, more: u64) {
    let target = seen.done.load(Ordering::Relaxed) + more;
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.done.load(Ordering::Relaxed) < target {
        assert!(Instant::now() < deadline, "the load stalled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Replicas by id and native address.
type Replicas = Vec<(NodeId, SocketAddr)>;

fn replicas(cluster: &LocalCluster, ids: &[NodeId]) -> Replicas {
    (ids.iter())
        .map(|&id| (id, cluster.endpoint(id).expect("a member").native))
        .collect()
}

/// The replica whose status says it leads, among `ids`.
async fn leader(ids: &Replicas) -> Option<NodeId> {
    for &(id, addr) in ids {
        if let Ok(s) = status::fetch(addr, Duration::from_millis(500)).await {
            if s.role == "leader" && s.peers_up.len() + 1 >= 2 {
                return Some(id);
            }
        }
    }
    None
}

/// From now, how long until one of `ids` leads (up to 10 s).
async fn time_to_leader(ids: &Replicas) -> Duration {
    let start = Instant::now();
    while leader(ids).await.is_none() {
        assert!(start.elapsed() < Duration::from_secs(10), "no new leader");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    start.elapsed()
}

/// SIGTERM replica `id`, check that it drained and exited 0 in time, and
/// start it again.
async fn drain_and_restart(cluster: &mut LocalCluster, id: NodeId) -> Duration {
    let (status, took) = cluster.terminate(id, DRAIN * 2).await.unwrap();
    let log = std::fs::read_to_string(cluster.log_path(id)).unwrap_or_default();
    assert!(status.success(), "replica {id} exited with {status}: {log}");
    assert!(took < DRAIN, "replica {id} took {took:?} to exit: {log}");
    assert!(
        log.contains("draining (4/4): storage flushed"),
        "replica {id} did not finish its drain: {log}"
    );
    cluster.restart(id).await.unwrap();
    took
}

/// Clients of `mode` through every replica (each starting at another).
async fn clients(cluster: &LocalCluster, mode: ClientMode, n: usize) -> Vec<Client> {
    let addrs = cluster.native_addrs();
    let mut out = Vec::new();
    for i in 0..n {
        let mut eps = addrs.clone();
        eps.rotate_left(i % addrs.len());
        let cfg = common::client_cfg(mode, CLIENT_TIMEOUT);
        out.push(Client::connect(eps, cfg).await.unwrap());
    }
    out
}

/// The rolling restart under load, then the checks. Replicas restart in
/// id order, but Zab's leader goes last (as ZooKeeper's operators do) and
/// the time to its successor is measured, and compared with a SIGKILL.
async fn rolling_restart(mut cluster: LocalCluster, clients: Vec<Client>, zab: bool) {
    let rec = Arc::new(Recorder::new());
    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (clients.into_iter().enumerate())
        .map(|(i, c)| tokio::spawn(load(c, i as u64, rec.clone(), seen.clone(), stop.clone())))
        .collect();
    let mut order: Vec<NodeId> = vec![1, 2, 3];
    if zab {
        let all = replicas(&cluster, &order);
        time_to_leader(&all).await;
        let l = leader(&all).await.expect("a leader");
        order.retain(|&id| id != l);
        order.push(l);
    }
    for (step, &id) in order.iter().enumerate() {
        progress(&seen, 200).await;
        let others: Vec<NodeId> = order.iter().copied().filter(|&o| o != id).collect();
        let others = replicas(&cluster, &others);
        let took = if zab && step == order.len() - 1 {
            let (took, handoff) =
                tokio::join!(drain_and_restart(&mut cluster, id), time_to_leader(&others));
            eprintln!("zab: a new leader {handoff:?} after SIGTERM of the leader");
            took
        } else {
            drain_and_restart(&mut cluster, id).await
        };
        eprintln!("replica {id} drained and exited 0 in {took:?}");
    }
    progress(&seen, 200).await;
    if zab {
        // For comparison: the leader SIGKILLed.
        let l = leader(&replicas(&cluster, &order)).await.expect("a leader");
        let others: Vec<NodeId> = order.iter().copied().filter(|&o| o != l).collect();
        let others = replicas(&cluster, &others);
        cluster.kill(l).await.unwrap();
        let handoff = time_to_leader(&others).await;
        eprintln!("zab: a new leader {handoff:?} after SIGKILL of the leader");
        cluster.restart(l).await.unwrap();
        progress(&seen, 100).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let definite = seen.definite.lock().unwrap().clone();
    assert!(definite.is_empty(), "definite failures: {definite:?}");
    let reader = Client::connect(
        cluster.native_addrs(),
        common::client_cfg(ClientMode::Proxy, CLIENT_TIMEOUT),
    )
    .await
    .unwrap();
    let acked = seen.acked.lock().unwrap().clone();
    assert!(acked.len() > 100, "too few writes: {}", acked.len());
    for (key, value) in &acked {
        let got = reader.get(key.clone()).await.unwrap();
        assert_eq!(got.as_deref(), Some(value.as_bytes()), "{key}");
    }
    let history = rec.history();
    eprintln!(
        "{} operations, {} acknowledged own writes read back",
        history.ops.len(),
        acked.len()
    );
    let report = check(&history, Model::Kv, Some(Duration::from_secs(60)));
    assert_eq!(
        report.verdict,
        Verdict::Linearizable,
        "{}",
        quorumkv_check::report::verdict_line(&report)
    );
    cluster.stop().await;
}

fn drain_arg() -> String {
    format!("{}ms", DRAIN.as_millis())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abd_rolling_restart_by_sigterm_loses_nothing() {
    let drain = drain_arg();
    let cfg = common::cluster_cfg("abd", 3, &["--drain-timeout", &drain, "--op-timeout", "2s"]);
    let cluster = LocalCluster::start(cfg).await.unwrap();
    let mut cs = clients(&cluster, ClientMode::Direct, 2).await;
    cs.extend(clients(&cluster, ClientMode::Proxy, 3).await);
    rolling_restart(cluster, cs, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zab_rolling_restart_by_sigterm_hands_leadership_over() {
    let args = vec!["--drain-timeout".to_string(), drain_arg()];
    let cluster = common::zab_cluster_with(args).await;
    let cs = clients(&cluster, ClientMode::Proxy, 4).await;
    rolling_restart(cluster, cs, true).await;
}

/// A drain held up by an operation that cannot finish (its replica lost
/// its peers): `/readyz` says draining meanwhile, and a second SIGTERM
/// cuts it short: the replica exits 0 at once, not after its 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_cuts_a_stuck_drain_short() {
    let args = ["--drain-timeout", "30s", "--op-timeout", "30s"];
    let cfg = LocalClusterConfig {
        metrics: true,
        ..common::cluster_cfg("abd", 3, &args)
    };
    let mut cluster = LocalCluster::start(cfg).await.unwrap();
    cluster.kill(2).await.unwrap();
    cluster.kill(3).await.unwrap();
    let one = cluster.endpoint(1).unwrap();
    let metrics = one.metrics.expect("a metrics port");
    let cfg = common::client_cfg(ClientMode::Proxy, Duration::from_secs(60));
    let c = Client::connect(vec![one.native], cfg).await.unwrap();
    let put = tokio::spawn(async move { c.put("k", "v").await });
    // The put reached replica 1 (it waits there for a quorum).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !common::http_get(metrics, "/metrics")
        .await
        .contains("quorumkv_client_requests_total{replica=\"1\"} 1")
    {
        assert!(Instant::now() < deadline, "the put never arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cluster.sigterm(1).unwrap();
    let ready = loop {
        let r = common::http_get(metrics, "/readyz").await;
        if r.contains("draining") || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(ready.starts_with("HTTP/1.0 503"), "{ready}");
    // Still draining a second later: the put holds it.
    let waited = cluster.wait_exit(1, Duration::from_secs(1)).await.unwrap();
    assert_eq!(waited, None, "the drain did not wait for the put");
    cluster.sigterm(1).unwrap();
    let status = cluster.wait_exit(1, Duration::from_secs(3)).await.unwrap();
    let log = std::fs::read_to_string(cluster.log_path(1)).unwrap_or_default();
    assert!(status.is_some_and(|s| s.success()), "{status:?}: {log}");
    assert!(
        log.contains("second signal: cutting the drain short"),
        "{log}"
    );
    // The client was never answered: its outcome is unknown, not a failure.
    let err = put.await.unwrap().unwrap_err();
    assert!(!err.is_definite(), "{err}");
}
