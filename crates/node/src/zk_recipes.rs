//! Seed 001's lock recipes (§II.D, Fig. 2), written once over
//! [`LockClient`]: our [`ZkClient`], or ZooKeeper's client (the bench's
//! `zk://` target implements the trait). Each acquisition returns a fencing
//! token, the lock node's `czxid` (a later acquisition is a later
//! transaction, so tokens grow).
//!
//! * [`tas_lock`]: test-and-set, one ephemeral znode of a fixed name
//!   created until a create succeeds. `watch: false` retries in a loop
//!   every `poll` (the seed's busy loop); `watch: true` waits for the
//!   holder's node to go (line 90's alternative).
//! * [`queue_lock`]: an ephemeral-sequential child of the lock directory;
//!   the smallest holds the lock, any other waiter watches the child just
//!   before its own (`quorumkv_core::znode::recipe::queue_step`).
//!
//! [`Recipe`] names them (the bench's `--recipe`, `chaos --workload lock`)
//! and [`acquire`] runs one.
//!
//! A lock held through a session is only as good as the session: a holder
//! paused past its session timeout loses its node while it still believes
//! it holds the lock. The token lets a fenced resource refuse the older
//! holder; real-time mutual exclusion is not promised.

use crate::zk::{CreateMode, WatchEvent, ZkClient, ZkClientError};
use quorumkv_core::znode::recipe::{queue_step, QueueStep};
use quorumkv_core::znode::ZkError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

/// What the recipes need of a session with a coordination service. Clones
/// share the session (the asynchronous recipes call from several tasks).
pub trait LockClient: Clone + Send + Sync + 'static {
    /// Where the session's watch events arrive, if the client has one
    /// stream for them (ours); `()` when each watch answers by itself.
    type Events: Send;

    /// Create an ephemeral node (`sequential`: the parent's counter
    /// appended to `path`); its actual path and `czxid`. `Ok(None)`: a node
    /// of that path exists.
    fn create_ephemeral(
        &self,
        path: &str,
        sequential: bool,
    ) -> impl Future<Output = Result<Option<(String, u64)>, ZkClientError>> + Send;

    /// Delete `path`, any version; a missing node is not an error.
    fn delete(&self, path: &str) -> impl Future<Output = Result<(), ZkClientError>> + Send;

    /// The names of `dir`'s children.
    fn children(
        &self,
        dir: &str,
    ) -> impl Future<Output = Result<Vec<String>, ZkClientError>> + Send;

    /// Set an `exists` watch on `path`; if the node exists, wait until the
    /// watch fires (the node deleted or changed). Returns at once when the
    /// node is already gone.
    fn wait_while_exists(
        &self,
        path: &str,
        events: &mut Self::Events,
    ) -> impl Future<Output = Result<(), ZkClientError>> + Send;

    /// Create the persistent node `path` unless it exists (a lock's
    /// directory).
    fn ensure_dir(&self, path: &str) -> impl Future<Output = Result<(), ZkClientError>> + Send;

    /// End the session: its ephemerals are deleted.
    fn close(self) -> impl Future<Output = ()> + Send;

    /// Drop the events left from an earlier acquisition (a watch that
    /// fired late) before the next one.
    fn drop_stale(events: &mut Self::Events);
}

impl LockClient for ZkClient {
    type Events = UnboundedReceiver<WatchEvent>;

    async fn create_ephemeral(
        &self,
        path: &str,
        sequential: bool,
    ) -> Result<Option<(String, u64)>, ZkClientError> {
        let mode = CreateMode {
            ephemeral: true,
            sequential,
        };
        match self.create(path, "", mode).await {
            Ok((node, stat)) => Ok(Some((node, stat.czxid))),
            Err(ZkClientError::Zk(ZkError::NodeExists)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn delete(&self, path: &str) -> Result<(), ZkClientError> {
        match ZkClient::delete(self, path, None).await {
            Ok(()) | Err(ZkClientError::Zk(ZkError::NoNode)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn children(&self, dir: &str) -> Result<Vec<String>, ZkClientError> {
        ZkClient::children(self, dir, false).await
    }

    async fn wait_while_exists(
        &self,
        path: &str,
        events: &mut Self::Events,
    ) -> Result<(), ZkClientError> {
        if self.exists(path, true).await?.is_some() {
            next_event(events, path).await?;
        }
        Ok(())
    }

    async fn ensure_dir(&self, path: &str) -> Result<(), ZkClientError> {
        match self.create(path, "", CreateMode::PERSISTENT).await {
            Ok(_) | Err(ZkClientError::Zk(ZkError::NodeExists)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn close(self) {
        let _ = ZkClient::close(self).await;
    }

    fn drop_stale(events: &mut Self::Events) {
        while events.try_recv().is_ok() {}
    }
}

/// Seed 001's four primitives (§II.D), the synchronous TAS in both forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Recipe {
    /// Synchronous test-and-set, retried every poll interval (busy loop).
    Tas,
    /// Synchronous test-and-set waiting on a watch (line 90).
    TasWatch,
    /// Creates on a timer (the poll interval), none awaited (line 101).
    AsyncTas,
    /// Fig. 2: sequential node, getChildren, watch the predecessor.
    Queue,
    /// Create and getChildren polling in parallel (lines 97-99).
    AsyncQueue,
}

impl Recipe {
    pub const ALL: [Recipe; 5] = [
        Recipe::Tas,
        Recipe::TasWatch,
        Recipe::AsyncTas,
        Recipe::Queue,
        Recipe::AsyncQueue,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Recipe::Tas => "tas",
            Recipe::TasWatch => "tas-watch",
            Recipe::AsyncTas => "async-tas",
            Recipe::Queue => "queue",
            Recipe::AsyncQueue => "async-queue",
        }
    }
    /// The queue recipes lock a directory (their children queue in it);
    /// the TAS recipes a node.
    pub fn is_queue(self) -> bool {
        matches!(self, Recipe::Queue | Recipe::AsyncQueue)
    }
}

impl fmt::Display for Recipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Recipe {
    type Err = String;
    fn from_str(s: &str) -> Result<Recipe, String> {
        (Recipe::ALL.into_iter())
            .find(|r| r.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                let names: Vec<_> = Recipe::ALL.iter().map(|r| r.name()).collect();
                format!("unknown recipe '{s}' (known: {})", names.join(", "))
            })
    }
}

/// Take the lock at `path` (a node for the TAS recipes, a directory that
/// exists for the queue recipes) with `recipe`; `poll` is the retry,
/// create or getChildren interval of the polling recipes. Returns the lock
/// and when it was held: for `async-tas` the successful create's answer,
/// which comes before the call returns (the creates still in flight are
/// awaited first).
pub async fn acquire<C: LockClient>(
    recipe: Recipe,
    zk: &C,
    path: &str,
    poll: Duration,
    events: &mut C::Events,
) -> Result<(Held, Instant), ZkClientError> {
    C::drop_stale(events);
    let now = |h: Held| (h, Instant::now());
    match recipe {
        Recipe::Tas => tas_lock(zk, path, false, poll, events).await.map(now),
        Recipe::TasWatch => tas_lock(zk, path, true, poll, events).await.map(now),
        Recipe::AsyncTas => tas_lock_async_at(zk, path, poll).await,
        Recipe::Queue => queue_lock(zk, path, events).await.map(now),
        Recipe::AsyncQueue => queue_lock_async(zk, path, poll, events).await.map(now),
    }
}

/// A lock held: the node that holds it and its fencing token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub node: String,
    pub token: u64,
}

/// Release: delete the lock node (the answer is not awaited by the seed's
/// asynchronous release; await it here to know it is gone).
pub async fn release<C: LockClient>(zk: &C, held: &Held) -> Result<(), ZkClientError> {
    zk.delete(&held.node).await
}

/// Wait for the next event about `path` on `events` (others are dropped:
/// one lock per client stream).
async fn next_event(
    events: &mut UnboundedReceiver<WatchEvent>,
    path: &str,
) -> Result<(), ZkClientError> {
    loop {
        match events.recv().await {
            Some(WatchEvent::Node { path: p, .. }) if p == path => return Ok(()),
            Some(WatchEvent::Node { .. }) => continue,
            Some(WatchEvent::SessionExpired) => return Err(ZkError::SessionExpired.into()),
            None => return Err(ZkClientError::Unexpected("the event stream closed".into())),
        }
    }
}

/// Synchronous test-and-set: create `path` (ephemeral) until it succeeds.
/// `events` is the client's watch stream ([`ZkClient::watches`]), used
/// with `watch`.
pub async fn tas_lock<C: LockClient>(
    zk: &C,
    path: &str,
    watch: bool,
    poll: Duration,
    events: &mut C::Events,
) -> Result<Held, ZkClientError> {
    loop {
        if let Some((node, token)) = zk.create_ephemeral(path, false).await? {
            return Ok(Held { node, token });
        }
        if watch {
            // Gone already: try again at once; else wait for its deletion.
            zk.wait_while_exists(path, events).await?;
        } else {
            tokio::time::sleep(poll).await;
        }
    }
}

/// Synchronous queue lock (Fig. 2) in directory `dir` (which must exist).
pub async fn queue_lock<C: LockClient>(
    zk: &C,
    dir: &str,
    events: &mut C::Events,
) -> Result<Held, ZkClientError> {
    let prefix = format!("{}/lock-", dir.trim_end_matches('/'));
    let (mine, token) = zk
        .create_ephemeral(&prefix, true)
        .await?
        .ok_or_else(|| ZkClientError::Unexpected("a sequential create found its node".into()))?;
    loop {
        let names = zk.children(dir).await?;
        match queue_step(&mine, &names) {
            QueueStep::Acquired => return Ok(Held { node: mine, token }),
            QueueStep::Watch(before) => {
                // Gone between the list and the watch: look again.
                zk.wait_while_exists(&before, events).await?;
            }
            // Our node is gone: the session expired.
            QueueStep::Missing => return Err(ZkError::SessionExpired.into()),
        }
    }
}

/// Asynchronous test-and-set (§II.D.4, line 101): a create every
/// `interval`, none awaited before the next, until one succeeds. The
/// creates still in flight then are awaited (they fail with `NodeExists`
/// while we hold the node) so that none can re-create it after release.
pub async fn tas_lock_async<C: LockClient>(
    zk: &C,
    path: &str,
    interval: Duration,
) -> Result<Held, ZkClientError> {
    tas_lock_async_at(zk, path, interval).await.map(|(h, _)| h)
}

/// [`tas_lock_async`], and when the successful create's answer arrived:
/// the lock is held from then, though the call returns only once the
/// creates still in flight have answered (up to a round trip later).
pub async fn tas_lock_async_at<C: LockClient>(
    zk: &C,
    path: &str,
    interval: Duration,
) -> Result<(Held, Instant), ZkClientError> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tick = tokio::time::interval(interval);
    let mut in_flight = 0usize;
    let mut held = None;
    while held.is_none() || in_flight > 0 {
        tokio::select! {
            _ = tick.tick(), if held.is_none() => {
                let (zk, path, tx) = (zk.clone(), path.to_string(), tx.clone());
                in_flight += 1;
                tokio::spawn(async move {
                    let _ = tx.send(zk.create_ephemeral(&path, false).await);
                });
            }
            Some(r) = rx.recv() => {
                in_flight -= 1;
                match r {
                    Ok(Some((node, token))) => {
                        let h = (Held { node, token }, Instant::now());
                        if held.replace(h).is_some() {
                            let why = "two creates of one lock node succeeded";
                            return Err(ZkClientError::Unexpected(why.into()));
                        }
                    }
                    Ok(None) => {}
                    Err(e) if held.is_none() => return Err(e),
                    Err(_) => {}
                }
            }
        }
    }
    Ok(held.expect("loop ends holding"))
}

/// Asynchronous queue lock (§II.D.3, lines 97-99, Fig. 4): the create is
/// issued and, without waiting for it, `getChildren` is polled every
/// `poll`; the first list that holds the created name (the "consistent
/// list") decides: the lock, or a watch on the predecessor as in the
/// synchronous queue lock.
pub async fn queue_lock_async<C: LockClient>(
    zk: &C,
    dir: &str,
    poll: Duration,
    events: &mut C::Events,
) -> Result<Held, ZkClientError> {
    let prefix = format!("{}/lock-", dir.trim_end_matches('/'));
    let c = zk.clone();
    let mut create = tokio::spawn(async move { c.create_ephemeral(&prefix, true).await });
    let (tx, mut lists) = tokio::sync::mpsc::unbounded_channel();
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut mine: Option<(String, u64)> = None;
    // Lists without our node once the create answered: it is gone.
    let mut missing = 0;
    // Polls are numbered; after a wait on a watch, the lists of polls sent
    // before it ended are stale (each would cost an `exists` round trip:
    // at 50 ms server RTT, seconds of backlog).
    let (mut sent, mut fresh_from) = (0u64, 0u64);
    loop {
        tokio::select! {
            r = &mut create, if mine.is_none() => {
                let created = r.map_err(|e| ZkClientError::Unexpected(e.to_string()))??;
                let why = "a sequential create found its node";
                mine = Some(created.ok_or_else(|| ZkClientError::Unexpected(why.into()))?);
            }
            _ = tick.tick() => {
                let (zk, dir, tx, seq) = (zk.clone(), dir.to_string(), tx.clone(), sent);
                sent += 1;
                tokio::spawn(async move { let _ = tx.send((seq, zk.children(&dir).await)); });
            }
            Some((seq, list)) = lists.recv() => {
                if seq < fresh_from {
                    continue;
                }
                let (Some((node, token)), names) = (&mine, list?) else { continue };
                match queue_step(node, &names) {
                    QueueStep::Acquired => return Ok(Held { node: node.clone(), token: *token }),
                    QueueStep::Watch(before) => {
                        missing = 0;
                        zk.wait_while_exists(&before, events).await?;
                        // Decide again with a fresh list (the next poll).
                        fresh_from = sent;
                    }
                    // A list sent before the create was applied: wait for
                    // a consistent one; a few in a row: our node is gone.
                    QueueStep::Missing => {
                        missing += 1;
                        if missing > 3 {
                            return Err(ZkError::SessionExpired.into());
                        }
                        continue;
                    }
                }
            }
        }
    }
}
