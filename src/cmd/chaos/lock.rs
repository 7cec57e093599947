//! `--workload lock`: seed 001's lock recipes (`quorumkv_node::zk_recipes`)
//! on real processes under the fault schedule. Every recipe has a lock of
//! its own and `--clients` clients taking it in turn: acquire, hold for a
//! short critical section, release, think. Each hold is recorded with its
//! fencing token (the lock node's czxid) and its real-time interval, and
//! each lock is checked with `quorumkv_check::znode::check_lock`.
//!
//! What a session-based lock promises is the token order: two holds never
//! share a token, and a hold that began after another carries a larger one
//! (a violation fails the run). Two holders at once by real time are
//! expected only when a holder's session expired under it (Jepsen's
//! finding on etcd): such an overlap is counted; one where neither holder
//! saw its session expire fails the run too.
//!
//! A failed acquisition or release (a timeout, a server gone) ends the
//! client's session: it is closed (its nodes go at once) or, if the close
//! fails too, left to expire (`SESSION_TIMEOUT`), and a new one opened.

use super::workload::OpCounts;
use quorumkv_check::znode::jsonl::lock_violations;
use quorumkv_check::znode::{Holding, LockViolation};
use quorumkv_core::op::Outcome;
use quorumkv_core::rng::SplitMix64;
use quorumkv_core::znode::ZkError;
use quorumkv_node::client::ClientConfig;
use quorumkv_node::zk::{WatchEvent, ZkClient, ZkClientError};
use quorumkv_node::zk_recipes::{self, LockClient, Recipe};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

/// The lock sessions' timeout: long enough for a session to move to
/// another server when its own is killed or paused, short enough that an
/// abandoned session's node does not block a lock for long.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(4);
/// An acquisition not done by then failed (a watch lost, a quorum gone).
const ACQUIRE_LIMIT: Duration = Duration::from_secs(10);
/// Mean critical section (uniform in 0 ..= twice it) and the pause
/// between holds.
const CS_MEAN_MS: u64 = 2;
const THINK: Duration = Duration::from_millis(10);
/// Retry, create or getChildren interval of the polling recipes.
const POLL: Duration = Duration::from_millis(5);

/// One hold as the client saw it: `expired` when its holder's session was
/// seen expired (an event, or the release refused with `SessionExpired`).
pub use quorumkv_check::znode::jsonl::Hold;

/// One recipe's lock: its holds and its failures.
#[derive(Debug, Default)]
pub struct LockLog {
    pub holds: Vec<Hold>,
    pub failed_acquires: u64,
    pub timed_out: u64,
    pub failed_releases: u64,
    pub first_error: Option<String>,
}

/// What every lock client shares.
pub struct LockRun {
    pub endpoints: Vec<SocketAddr>,
    pub cfg: ClientConfig,
    pub seed: u64,
    pub recipes: Vec<Recipe>,
    pub start: Instant,
    pub counts: Arc<OpCounts>,
    /// Per recipe, in `recipes`' order.
    pub logs: Vec<Mutex<LockLog>>,
}

impl LockRun {
    /// The lock of recipe `r`: a node for TAS, a directory for the queues.
    pub fn path(&self, r: usize) -> String {
        let recipe = self.recipes[r];
        match recipe.is_queue() {
            true => format!("/locks/{recipe}"),
            false => format!("/locks/{recipe}-node"),
        }
    }
    fn micros(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_micros() as u64
    }
    fn log(&self, r: usize) -> std::sync::MutexGuard<'_, LockLog> {
        self.logs[r].lock().expect("not poisoned")
    }
}

/// Create `/locks` and the queue recipes' directories (retried: the
/// cluster may still be electing).
pub async fn prepare(run: &LockRun) -> anyhow::Result<()> {
    let zk = ZkClient::connect(run.endpoints.clone(), run.cfg.clone(), SESSION_TIMEOUT)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "--workload lock: cannot open a session ({e}); it needs a protocol that serves znodes"
            )
        })?;
    let dirs = std::iter::once("/locks".to_string()).chain(
        (0..run.recipes.len())
            .filter(|&r| run.recipes[r].is_queue())
            .map(|r| run.path(r)),
    );
    for dir in dirs {
        let mut tries = 0;
        while let Err(e) = zk.ensure_dir(&dir).await {
            tries += 1;
            if tries == 10 {
                anyhow::bail!("--workload lock: cannot create {dir}: {e}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    LockClient::close(zk).await;
    Ok(())
}

/// A lock session and its watch events.
struct Session {
    zk: ZkClient,
    events: UnboundedReceiver<WatchEvent>,
}

/// End a session that failed: close it, or leave it to expire.
async fn abandon(s: Session) {
    let _ = tokio::time::timeout(Duration::from_secs(2), s.zk.close()).await;
}

/// Client `id` of recipe `r`'s lock: acquire, hold, release until `stop`.
pub async fn client_loop(run: Arc<LockRun>, r: usize, id: u64, stop: Arc<AtomicBool>) {
    let mut rng = SplitMix64(run.seed ^ (id + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let (recipe, path) = (run.recipes[r], run.path(r));
    // Sessions spread over the servers (the client moves on failure).
    let mut endpoints = run.endpoints.clone();
    let n = endpoints.len().max(1);
    endpoints.rotate_left(id as usize % n);
    let mut session: Option<Session> = None;
    while !stop.load(Ordering::Relaxed) {
        let Some(mut s) = session.take() else {
            match ZkClient::connect(endpoints.clone(), run.cfg.clone(), SESSION_TIMEOUT).await {
                Ok(zk) => match zk.watches() {
                    Some(events) => session = Some(Session { zk, events }),
                    None => return,
                },
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
            continue;
        };
        let got = zk_recipes::acquire(recipe, &s.zk, &path, POLL, &mut s.events);
        let (held, at) = match tokio::time::timeout(ACQUIRE_LIMIT, got).await {
            Ok(Ok(h)) => h,
            // The lock's directory is gone (a cluster that lost its tree):
            // made again, as any user of the recipe would.
            Ok(Err(ZkClientError::Zk(ZkError::NoNode))) => {
                let dir = if recipe.is_queue() { &path } else { "/locks" };
                for d in ["/locks", dir] {
                    let _ = s.zk.ensure_dir(d).await;
                }
                session = Some(s);
                continue;
            }
            failed => {
                let why = match &failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no lock after {ACQUIRE_LIMIT:?}"),
                };
                run.failed_acquire(r, failed.is_err(), why);
                abandon(s).await;
                tokio::time::sleep(THINK).await;
                continue;
            }
        };
        let cs = Duration::from_micros(rng.below(2 * CS_MEAN_MS * 1000));
        tokio::time::sleep(cs).await;
        let released = Instant::now();
        let release = zk_recipes::release(&s.zk, &held).await;
        let mut expired = matches!(release, Err(ZkClientError::Zk(ZkError::SessionExpired)));
        while let Ok(e) = s.events.try_recv() {
            expired |= e == WatchEvent::SessionExpired;
        }
        run.counts.count(&Outcome::Ok(None));
        let hold = Hold {
            holding: Holding {
                client: id,
                token: held.token,
                acquired: run.micros(at),
                released: Some(run.micros(released)),
            },
            expired,
        };
        run.held(r, hold, &release);
        match release {
            Ok(()) => session = Some(s),
            Err(_) => abandon(s).await,
        }
        tokio::time::sleep(THINK).await;
    }
    if let Some(s) = session {
        LockClient::close(s.zk).await;
    }
}

impl LockRun {
    /// A client of lock `r` got no lock (`timed_out`: not within
    /// [`ACQUIRE_LIMIT`]).
    fn failed_acquire(&self, r: usize, timed_out: bool, why: String) {
        self.counts.count(&Outcome::Fail);
        let mut log = self.log(r);
        log.failed_acquires += 1;
        log.timed_out += u64::from(timed_out);
        log.first_error.get_or_insert(why);
    }

    /// A client of lock `r` held it and let it go (`release`: how).
    fn held(&self, r: usize, hold: Hold, release: &Result<(), ZkClientError>) {
        let mut log = self.log(r);
        log.holds.push(hold);
        if let Err(e) = release {
            log.failed_releases += 1;
            log.first_error.get_or_insert(format!("release: {e}"));
        }
    }
}

/// One lock's verdict.
pub struct LockVerdict {
    pub recipe: Recipe,
    pub holds: usize,
    pub failed_acquires: u64,
    pub timed_out: u64,
    pub failed_releases: u64,
    pub first_error: Option<String>,
    /// Tokens shared or out of order: the lock's promise broken.
    pub token_violations: Vec<LockViolation>,
    /// Two holders at once while the earlier one's session was seen
    /// expired (what a session lock allows) / not seen expired (a bug).
    pub expired_overlaps: usize,
    pub overlaps: Vec<LockViolation>,
}

impl LockVerdict {
    pub fn broken(&self) -> bool {
        !self.token_violations.is_empty() || !self.overlaps.is_empty()
    }

    pub fn line(&self) -> String {
        let mut s = format!(
            "lock {}: {} holds, {} failed acquisitions ({} timed out), {} failed releases; ",
            self.recipe, self.holds, self.failed_acquires, self.timed_out, self.failed_releases
        );
        s += &match self.token_violations.first() {
            None => "tokens in order".into(),
            Some(v) => format!(
                "{} TOKEN VIOLATIONS, first: {v}",
                self.token_violations.len()
            ),
        };
        s += &format!(
            "; {} overlaps by real time after a session expired",
            self.expired_overlaps
        );
        if let Some(v) = self.overlaps.first() {
            s += &format!(
                "; {} OVERLAPS WITH NO SESSION EXPIRED, first: {v}",
                self.overlaps.len()
            );
        }
        if let Some(e) = &self.first_error {
            s += &format!(" (first error: {e})");
        }
        s
    }
}

/// Check every lock of the run.
pub fn verdicts(run: &LockRun) -> Vec<LockVerdict> {
    (0..run.recipes.len())
        .map(|r| verdict(run.recipes[r], &run.log(r)))
        .collect()
}

/// Check one lock's holds.
fn verdict(recipe: Recipe, log: &LockLog) -> LockVerdict {
    let (violations, expired_overlaps) = lock_violations(&log.holds);
    let (overlaps, token_violations) =
        (violations.into_iter()).partition(|v| matches!(v, LockViolation::Overlap(..)));
    LockVerdict {
        recipe,
        holds: log.holds.len(),
        failed_acquires: log.failed_acquires,
        timed_out: log.timed_out,
        failed_releases: log.failed_releases,
        first_error: log.first_error.clone(),
        token_violations,
        expired_overlaps,
        overlaps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(client: u64, token: u64, from: u64, to: u64, expired: bool) -> Hold {
        let holding = Holding {
            client,
            token,
            acquired: from,
            released: Some(to),
        };
        Hold { holding, expired }
    }

    fn judge(holds: Vec<Hold>) -> LockVerdict {
        let log = LockLog {
            holds,
            ..LockLog::default()
        };
        verdict(Recipe::Queue, &log)
    }

    #[test]
    fn an_expired_holder_may_overlap_but_tokens_must_grow() {
        let clean = judge(vec![hold(1, 5, 0, 10, false), hold(2, 7, 20, 30, false)]);
        assert!(!clean.broken(), "{}", clean.line());
        assert!(clean.line().contains("tokens in order; 0 overlaps"));
        // Client 1 paused past its session timeout: client 2 holds too.
        let paused = judge(vec![hold(1, 5, 0, 100, true), hold(2, 7, 20, 30, false)]);
        assert!(!paused.broken(), "{}", paused.line());
        assert_eq!(paused.expired_overlaps, 1);
        // The same overlap with the session alive: the lock failed.
        let both = judge(vec![hold(1, 5, 0, 100, false), hold(2, 7, 20, 30, false)]);
        assert!(both.broken());
        assert!(both.line().contains("1 OVERLAPS WITH NO SESSION EXPIRED"));
        // A stale grant answered late (its session expired meanwhile).
        let stale = judge(vec![hold(2, 7, 20, 30, false), hold(1, 5, 40, 50, true)]);
        assert!(!stale.broken(), "{}", stale.line());
        // Tokens that restart (a service that lost its history).
        let reset = judge(vec![hold(1, 7, 20, 30, false), hold(2, 5, 40, 50, false)]);
        assert!(reset.broken());
        assert!(
            reset.line().contains("1 TOKEN VIOLATIONS"),
            "{}",
            reset.line()
        );
    }
}
