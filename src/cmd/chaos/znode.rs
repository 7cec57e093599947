//! `--workload znode`: the clients drive the coordination service (seed
//! 001, `--protocol zab`) through `ZkClient` sessions, with the simulator's
//! operation mix (`quorumkv_check::znode::workload_op`: creates, ephemeral
//! and sequential ones too, conditional deletes and sets, reads with
//! watches, sessions closed and reopened), and what they saw is checked
//! against the znode model (`quorumkv_check::znode::ZnodeSpec`).
//!
//! Sessions outlive the run (their timeout is at least three times its
//! length), so every session end in the history is a client's own close
//! and the model needs no expiry; a killed or paused server moves its
//! sessions to another server.

use super::workload::OpCounts;
use quorumkv_check::znode::{observed, workload_op, ZnodeOp as Seen};
use quorumkv_check::SpecOp;
use quorumkv_core::op::Outcome;
use quorumkv_core::rng::SplitMix64;
use quorumkv_core::znode::{ZnodeOp, ZnodeReply};
use quorumkv_node::client::ClientConfig;
use quorumkv_node::zk::{ZkClient, ZkClientError};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A client's pause between operations: the model checks the tree as one
/// object (no split by key), and its search grows with the history, so a
/// 20 s run is kept to a few thousand operations.
const THINK: Duration = Duration::from_millis(10);

/// The znode history of a run: each request as the model sees it, with
/// its invocation and answer times (ns since the start).
pub struct ZnodeHistory {
    start: Instant,
    ops: Mutex<Vec<SpecOp<Seen>>>,
}

impl ZnodeHistory {
    pub fn new() -> Arc<ZnodeHistory> {
        Arc::new(ZnodeHistory {
            start: Instant::now(),
            ops: Mutex::default(),
        })
    }
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
    fn push(&self, op: SpecOp<Seen>) {
        self.ops.lock().expect("not poisoned").push(op);
    }
    pub fn take(&self) -> Vec<SpecOp<Seen>> {
        std::mem::take(&mut *self.ops.lock().expect("not poisoned"))
    }
}

/// Send `op` on `zk`'s session and record it: an answer (ZooKeeper's
/// errors included) with its time, an unknown outcome without; a call
/// that certainly had no effect is left out (it constrains nothing).
async fn recorded(
    zk: &ZkClient,
    op: ZnodeOp,
    history: &ZnodeHistory,
    counts: &OpCounts,
) -> Result<ZnodeReply, ZkClientError> {
    let call = history.now();
    let r = zk.call(op.clone()).await;
    let reply = match &r {
        Ok(reply) => Some(Some(reply.clone())),
        Err(ZkClientError::Zk(e)) => Some(Some(ZnodeReply::Error(e.clone()))),
        Err(e) if e.is_definite() => None,
        Err(_) => Some(None),
    };
    counts.count(&match &reply {
        Some(Some(_)) => Outcome::Ok(None),
        Some(None) => Outcome::Unknown,
        None => Outcome::Fail,
    });
    if let Some(reply) = reply {
        let ret = reply.as_ref().map(|_| history.now());
        if let Some(seen) = observed(zk.session(), &op, reply.as_ref()) {
            history.push(SpecOp {
                call,
                ret,
                op: seen,
            });
        }
    }
    r
}

/// Open a session, recorded as the model's `OpenSession` (an attempt that
/// fails is left out: a session never used constrains nothing).
async fn open(
    endpoints: &[SocketAddr],
    cfg: &ClientConfig,
    timeout: Duration,
    history: &ZnodeHistory,
    counts: &OpCounts,
) -> Option<ZkClient> {
    let call = history.now();
    match ZkClient::connect(endpoints.to_vec(), cfg.clone(), timeout).await {
        Ok(zk) => {
            let ret = Some(history.now());
            let op = Seen::OpenSession {
                session: zk.session(),
            };
            history.push(SpecOp { call, ret, op });
            counts.count(&Outcome::Ok(None));
            Some(zk)
        }
        Err(e) => {
            counts.count(&Outcome::failure(e.is_definite()));
            None
        }
    }
}

/// The settings every znode client shares.
pub struct ZnodeRun {
    pub endpoints: Vec<SocketAddr>,
    pub cfg: ClientConfig,
    pub session_timeout: Duration,
    pub seed: u64,
    pub history: Arc<ZnodeHistory>,
    pub counts: Arc<OpCounts>,
}

/// One logical client: until `stop`, the workload's operations one at a
/// time on its session (a new session after its own close).
pub async fn client_loop(run: Arc<ZnodeRun>, id: u64, stop: Arc<AtomicBool>) {
    let mut rng = SplitMix64(run.seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let (h, counts) = (&run.history, &run.counts);
    let mut zk: Option<ZkClient> = None;
    let mut n = 0u32;
    let timeout_ms = run.session_timeout.as_millis() as u64;
    while !stop.load(Ordering::Relaxed) {
        let op = workload_op(&mut rng, id as usize, n, timeout_ms);
        n += 1;
        let Some(z) = &zk else {
            zk = open(&run.endpoints, &run.cfg, run.session_timeout, h, counts).await;
            if zk.is_none() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            continue;
        };
        let answered = match op {
            // A session is opened once, when the client has none.
            ZnodeOp::OpenSession { .. } => continue,
            ZnodeOp::CloseSession => {
                let r = recorded(z, op, h, counts).await;
                // Closed or not, this client starts a new session.
                zk = None;
                r.is_ok()
            }
            op => matches!(
                recorded(z, op, h, counts).await,
                Ok(_) | Err(ZkClientError::Zk(_))
            ),
        };
        // No server to talk to fails fast: do not spin on it.
        let pause = if answered { THINK } else { 2 * THINK };
        tokio::time::sleep(pause).await;
    }
}

/// After the faults: one more session reads every path of the workload and
/// the sequential children, retrying a few times, so that a change lost
/// since the last read still shows. Returns how many reads were answered.
pub async fn final_reads(run: &ZnodeRun) -> (u64, Option<String>) {
    let (h, counts) = (&run.history, &run.counts);
    let mut zk = None;
    for _ in 0..10 {
        zk = open(&run.endpoints, &run.cfg, run.session_timeout, h, counts).await;
        if zk.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let Some(zk) = zk else {
        return (0, Some("no session could be opened".into()));
    };
    let reads = (quorumkv_check::znode::WORKLOAD_PATHS.iter())
        .map(|p| ZnodeOp::GetData {
            path: p.to_string(),
            watch: false,
        })
        .chain(["/", "/q"].map(|p| ZnodeOp::GetChildren {
            path: p.into(),
            watch: false,
        }));
    let (mut read, mut last_error) = (0, None);
    for op in reads {
        for _ in 0..5 {
            match recorded(&zk, op.clone(), h, counts).await {
                Ok(_) | Err(ZkClientError::Zk(_)) => {
                    read += 1;
                    break;
                }
                Err(e) => last_error = Some(e.to_string()),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    (read, last_error)
}
