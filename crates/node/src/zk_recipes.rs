//! Seed 001's lock recipes (§II.D, Fig. 2) over [`ZkClient`], synchronous
//! forms: each acquisition returns a fencing token, the lock node's `czxid`
//! (a later acquisition is a later transaction, so tokens grow).
//!
//! * [`tas_lock`]: test-and-set, one ephemeral znode of a fixed name
//!   created until a create succeeds. `watch: false` retries in a loop
//!   every `poll` (the seed's busy loop); `watch: true` waits for the
//!   holder's node to go (line 90's alternative).
//! * [`queue_lock`]: an ephemeral-sequential child of the lock directory;
//!   the smallest holds the lock, any other waiter watches the child just
//!   before its own (`quorumkv_core::znode::recipe::queue_step`).
//!
//! A lock held through a session is only as good as the session: a holder
//! paused past its session timeout loses its node while it still believes
//! it holds the lock. The token lets a fenced resource refuse the older
//! holder; real-time mutual exclusion is not promised.

use crate::zk::{CreateMode, WatchEvent, ZkClient, ZkClientError};
use quorumkv_core::znode::recipe::{queue_step, QueueStep};
use quorumkv_core::znode::ZkError;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// A lock held: the node that holds it and its fencing token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub node: String,
    pub token: u64,
}

/// Release: delete the lock node (the answer is not awaited by the seed's
/// asynchronous release; await it here to know it is gone).
pub async fn release(zk: &ZkClient, held: &Held) -> Result<(), ZkClientError> {
    match zk.delete(&held.node, None).await {
        Ok(()) | Err(ZkClientError::Zk(ZkError::NoNode)) => Ok(()),
        Err(e) => Err(e),
    }
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
pub async fn tas_lock(
    zk: &ZkClient,
    path: &str,
    watch: bool,
    poll: Duration,
    events: &mut UnboundedReceiver<WatchEvent>,
) -> Result<Held, ZkClientError> {
    loop {
        match zk.create(path, "", CreateMode::EPHEMERAL).await {
            Ok((node, stat)) => {
                return Ok(Held {
                    node,
                    token: stat.czxid,
                })
            }
            Err(ZkClientError::Zk(ZkError::NodeExists)) => {}
            Err(e) => return Err(e),
        }
        if watch {
            // Gone already: try again at once; else wait for its deletion.
            if zk.exists(path, true).await?.is_some() {
                next_event(events, path).await?;
            }
        } else {
            tokio::time::sleep(poll).await;
        }
    }
}

/// Synchronous queue lock (Fig. 2) in directory `dir` (which must exist).
pub async fn queue_lock(
    zk: &ZkClient,
    dir: &str,
    events: &mut UnboundedReceiver<WatchEvent>,
) -> Result<Held, ZkClientError> {
    let prefix = format!("{}/lock-", dir.trim_end_matches('/'));
    let (mine, stat) = zk
        .create(&prefix, "", CreateMode::EPHEMERAL_SEQUENTIAL)
        .await?;
    loop {
        let names = zk.children(dir, false).await?;
        match queue_step(&mine, &names) {
            QueueStep::Acquired => {
                return Ok(Held {
                    node: mine,
                    token: stat.czxid,
                })
            }
            QueueStep::Watch(before) => {
                // Gone between the list and the watch: look again.
                if zk.exists(&before, true).await?.is_some() {
                    next_event(events, &before).await?;
                }
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
pub async fn tas_lock_async(
    zk: &ZkClient,
    path: &str,
    interval: Duration,
) -> Result<Held, ZkClientError> {
    tas_lock_async_at(zk, path, interval).await.map(|(h, _)| h)
}

/// [`tas_lock_async`], and when the successful create's answer arrived:
/// the lock is held from then, though the call returns only once the
/// creates still in flight have answered (up to a round trip later).
pub async fn tas_lock_async_at(
    zk: &ZkClient,
    path: &str,
    interval: Duration,
) -> Result<(Held, tokio::time::Instant), ZkClientError> {
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
                    let _ = tx.send(zk.create(&path, "", CreateMode::EPHEMERAL).await);
                });
            }
            Some(r) = rx.recv() => {
                in_flight -= 1;
                match r {
                    Ok((node, stat)) => {
                        let h = (Held { node, token: stat.czxid }, tokio::time::Instant::now());
                        if held.replace(h).is_some() {
                            let why = "two creates of one lock node succeeded";
                            return Err(ZkClientError::Unexpected(why.into()));
                        }
                    }
                    Err(ZkClientError::Zk(ZkError::NodeExists)) => {}
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
pub async fn queue_lock_async(
    zk: &ZkClient,
    dir: &str,
    poll: Duration,
    events: &mut UnboundedReceiver<WatchEvent>,
) -> Result<Held, ZkClientError> {
    let prefix = format!("{}/lock-", dir.trim_end_matches('/'));
    let c = zk.clone();
    let mut create = tokio::spawn(async move {
        c.create(&prefix, "", CreateMode::EPHEMERAL_SEQUENTIAL)
            .await
    });
    let (tx, mut lists) = tokio::sync::mpsc::unbounded_channel();
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut mine: Option<(String, u64)> = None;
    // Lists without our node once the create answered: it is gone.
    let mut missing = 0;
    loop {
        tokio::select! {
            r = &mut create, if mine.is_none() => {
                let (node, stat) = r.map_err(|e| ZkClientError::Unexpected(e.to_string()))??;
                mine = Some((node, stat.czxid));
            }
            _ = tick.tick() => {
                let (zk, dir, tx) = (zk.clone(), dir.to_string(), tx.clone());
                tokio::spawn(async move { let _ = tx.send(zk.children(&dir, false).await); });
            }
            Some(list) = lists.recv() => {
                let (Some((node, token)), names) = (&mine, list?) else { continue };
                match queue_step(node, &names) {
                    QueueStep::Acquired => return Ok(Held { node: node.clone(), token: *token }),
                    QueueStep::Watch(before) => {
                        missing = 0;
                        if zk.exists(&before, true).await?.is_some() {
                            next_event(events, &before).await?;
                        }
                        // Decide again with a fresh list (the next poll).
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
