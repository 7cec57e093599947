//! The coordination service's client (seed 001 §II.C; docs/src/protocols/coordination-service.md):
//! ZooKeeper's calls over a [`Client`] to a Zab cluster.
//!
//! Every call is an `async fn` on `&self`: awaiting each in turn is the
//! synchronous form; starting several and awaiting them later (or
//! `tokio::join!`) is the asynchronous, pipelined form. Calls of one
//! client travel on one connection and take effect in the order sent.
//!
//! The session is the client's id ([`Client::id`]). [`ZkClient::connect`]
//! opens it and heartbeats (a `Ping` every third of the timeout); the
//! leader expires a session it has not heard of for its timeout and deletes
//! its ephemerals. [`ZkClient::close`] closes it at once. As in ZooKeeper,
//! a session that is gone writes nothing more: the servers refuse its
//! writes with `SessionExpired`, including one the client gave up on that
//! a paused server delivers late (the id is session-bound,
//! `znode::tree::SESSION_BOUND`). Watch events
//! arrive on [`ZkClient::watches`], one per fired watch, before the answer
//! to any later call.
//!
//! Watches live at the server that set them, for that connection. When
//! the client reconnects (its server died, or the link broke) it sends
//! the watches it still holds to the new server (`SetWatches`, ZooKeeper's
//! name) with what it read of each node: a watch whose node changed in
//! between fires at once, the others are set there. This happens right
//! after the call (or heartbeat) that reconnected.
//!
//! Identities ([`ZkClient::add_auth`], ZooKeeper's `addAuth`) belong to the
//! connection, as in ZooKeeper: the client remembers them and adds them
//! again on the new connection before its next call. A call that itself
//! reconnected went without them: if it was refused for them (`NoAuth`,
//! `InvalidAcl`, both definite), it is sent once more after they are.
//! A login (`ClientConfig::credentials`) is the `user` identity on every
//! connection, set by the server.

use crate::client::{Client, ClientConfig, ClientError, ClientMode};
use bytes::Bytes;
use quorumkv_core::znode::op::{ZnodeOp, ZnodeReply};
use quorumkv_core::znode::{Acl, EventType, Rewatch, Stat, WatchKind, ZkError};
use quorumkv_core::{OpError, Request, Response};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc;

#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ZkClientError {
    /// ZooKeeper's own errors: definite, the call had no effect.
    #[error("{0}")]
    Zk(#[from] ZkError),
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("unexpected answer from the server: {0}")]
    Unexpected(String),
}

impl ZkClientError {
    /// True when the call certainly had no effect.
    pub fn is_definite(&self) -> bool {
        match self {
            ZkClientError::Zk(_) => true,
            ZkClientError::Client(e) => e.is_definite(),
            ZkClientError::Unexpected(_) => false,
        }
    }
}

/// What happened to a watched node, or to the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    Node {
        event: EventType,
        path: String,
    },
    /// The leader expired this client's session: its ephemerals are gone.
    SessionExpired,
}

/// How a node is created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CreateMode {
    pub ephemeral: bool,
    pub sequential: bool,
}

impl CreateMode {
    pub const PERSISTENT: CreateMode = CreateMode {
        ephemeral: false,
        sequential: false,
    };
    pub const EPHEMERAL: CreateMode = CreateMode {
        ephemeral: true,
        sequential: false,
    };
    pub const EPHEMERAL_SEQUENTIAL: CreateMode = CreateMode {
        ephemeral: true,
        sequential: true,
    };
}

/// A session with the coordination service. Cheap to clone: clones share
/// the connection and the session (the asynchronous recipes issue calls
/// from several tasks); the heartbeats stop when the last clone goes.
#[derive(Clone)]
pub struct ZkClient {
    client: Client,
    heartbeat: Option<Arc<Heartbeat>>,
    rewatch: Arc<Rewatcher>,
    auths: Arc<Auths>,
}

/// The identities added to this session's connections (`add_auth`), and
/// the connection (`Client::links`) they were last sent on.
#[derive(Default)]
struct Auths {
    link: AtomicU64,
    held: Mutex<Vec<(String, String)>>,
}

impl Auths {
    /// Send the identities again if the connection changed since they were
    /// sent. True when they were sent now.
    async fn again(&self, client: &Client) -> bool {
        let held = self.held.lock().expect("no poisoning").clone();
        let now = client.links();
        if held.is_empty() || self.link.load(Ordering::SeqCst) == now {
            return false;
        }
        for (scheme, auth) in held {
            let op = Request::Znode(ZnodeOp::AddAuth { scheme, auth });
            if !matches!(
                client.call(op).await,
                Ok(Response::Znode(ZnodeReply::AuthAdded))
            ) {
                return false;
            }
        }
        if client.links() == now {
            self.link.store(now, Ordering::SeqCst);
        }
        true
    }
}

/// The watches this session holds and the connection they are on.
#[derive(Default)]
struct Rewatcher {
    /// `Client::links` when the watches were last set (0: not yet known).
    link: AtomicU64,
    held: Mutex<BTreeMap<(String, WatchKind), Rewatch>>,
}

impl Rewatcher {
    fn note(&self, w: Rewatch) {
        let key = (w.path().to_string(), w.kind());
        self.held.lock().expect("no poisoning").insert(key, w);
    }
    /// A watch fired: the server dropped it.
    fn fired(&self, event: EventType, path: &str) {
        let mut held = self.held.lock().expect("no poisoning");
        let kinds: &[WatchKind] = match event {
            EventType::NodeChildrenChanged => &[WatchKind::Child],
            EventType::NodeDeleted => &[WatchKind::Data, WatchKind::Child],
            _ => &[WatchKind::Data],
        };
        for k in kinds {
            held.remove(&(path.to_string(), *k));
        }
    }
    /// The client reconnected since the watches were set: set them again
    /// at the new server.
    async fn after_call(&self, client: &Client) {
        let now = client.links();
        let before = self.link.swap(now, Ordering::SeqCst);
        if before == 0 || before == now {
            return;
        }
        let watches: Vec<Rewatch> = (self.held.lock().expect("no poisoning"))
            .values()
            .cloned()
            .collect();
        if watches.is_empty() {
            return;
        }
        let op = Request::Znode(ZnodeOp::SetWatches { watches });
        if !matches!(
            client.call(op).await,
            Ok(Response::Znode(ZnodeReply::WatchesSet { .. }))
        ) {
            // Not set: try again after the next call.
            self.link.store(before, Ordering::SeqCst);
        }
    }
}

/// The heartbeat task, stopped when dropped.
struct Heartbeat(tokio::task::JoinHandle<()>);

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

type R<T> = Result<T, ZkClientError>;

impl ZkClient {
    /// Connect through the servers (the znode service runs on Zab, which
    /// has no client-side coordinator), open a session with
    /// `session_timeout` and keep it alive.
    pub async fn connect<E: ToString>(
        endpoints: impl IntoIterator<Item = E>,
        cfg: ClientConfig,
        session_timeout: Duration,
    ) -> R<ZkClient> {
        let cfg = ClientConfig {
            mode: ClientMode::Proxy,
            ..cfg
        };
        let client = Client::connect_session_bound(endpoints, cfg).await?;
        let mut zk = ZkClient {
            client,
            heartbeat: None,
            rewatch: Arc::default(),
            auths: Arc::default(),
        };
        let timeout_ms = session_timeout.as_millis() as u64;
        match zk.call(ZnodeOp::OpenSession { timeout_ms }).await? {
            ZnodeReply::Session { .. } => {}
            other => return Err(unexpected(other)),
        }
        let (c, rewatch) = (zk.client.clone(), zk.rewatch.clone());
        let every = (session_timeout / 3).max(Duration::from_millis(10));
        zk.heartbeat = Some(Arc::new(Heartbeat(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                // A lost ping is no news: the next one goes on time.
                let _ = c.call(Request::Znode(ZnodeOp::Ping)).await;
                // A client that only waits for events moves its watches too.
                rewatch.after_call(&c).await;
            }
        }))));
        Ok(zk)
    }

    /// A client without a session (no heartbeats): it may do anything but
    /// create ephemerals. The CLI's one-shot commands use it.
    pub async fn connect_without_session<E: ToString>(
        endpoints: impl IntoIterator<Item = E>,
        cfg: ClientConfig,
    ) -> R<ZkClient> {
        let cfg = ClientConfig {
            mode: ClientMode::Proxy,
            ..cfg
        };
        Ok(ZkClient {
            client: Client::connect(endpoints, cfg).await?,
            heartbeat: None,
            rewatch: Arc::default(),
            auths: Arc::default(),
        })
    }

    /// This session's id (the client's id).
    pub fn session(&self) -> u64 {
        self.client.id()
    }

    /// The stream of watch and session events; the first call takes it.
    /// Call it inside the tokio runtime (it spawns the translating task).
    pub fn watches(&self) -> Option<mpsc::UnboundedReceiver<WatchEvent>> {
        let mut events = self.client.events()?;
        let (tx, rx) = mpsc::unbounded_channel();
        let rewatch = self.rewatch.clone();
        tokio::spawn(async move {
            while let Some(e) = events.recv().await {
                let w = match (e.kind.as_str(), EventType::parse(&e.kind)) {
                    ("expired", _) => WatchEvent::SessionExpired,
                    (_, Some(event)) => {
                        let path = String::from_utf8_lossy(&e.key).into_owned();
                        rewatch.fired(event, &path);
                        WatchEvent::Node { event, path }
                    }
                    _ => continue,
                };
                if tx.send(w).is_err() {
                    return;
                }
            }
        });
        Some(rx)
    }

    /// Any znode request, its answer as the server gave it (ZooKeeper's
    /// errors come back as `Err(ZkClientError::Zk)`). The typed calls
    /// below are this and a match.
    pub async fn call(&self, op: ZnodeOp) -> R<ZnodeReply> {
        if self.rewatch.link.load(Ordering::SeqCst) == 0 {
            // The connection the first watches go on.
            let _ = (self.rewatch.link).compare_exchange(
                0,
                self.client.links(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
        }
        self.auths.again(&self.client).await;
        let mut r = self.client.call(Request::Znode(op.clone())).await;
        let refused = matches!(
            r,
            Ok(Response::Znode(
                ZnodeReply::Error(ZkError::NoAuth | ZkError::InvalidAcl)
                    | ZnodeReply::MultiFailed {
                        error: ZkError::NoAuth | ZkError::InvalidAcl,
                        ..
                    }
            ))
        );
        if refused && self.auths.again(&self.client).await {
            r = self.client.call(Request::Znode(op)).await;
        }
        self.rewatch.after_call(&self.client).await;
        match r? {
            Response::Znode(ZnodeReply::Error(e)) => Err(e.into()),
            Response::Znode(r) => Ok(r),
            Response::Failed(e) => Err(ClientError::Op(e).into()),
            other => Err(ZkClientError::Unexpected(format!(
                "{other:?} (does the cluster's protocol serve znodes?)"
            ))),
        }
    }

    /// Create `path`; the answer is the actual path (with its sequence
    /// suffix) and the new node's stat (its `czxid` is a fencing token).
    pub async fn create(
        &self,
        path: &str,
        data: impl Into<Bytes>,
        mode: CreateMode,
    ) -> R<(String, Stat)> {
        let op = ZnodeOp::Create {
            path: path.into(),
            data: data.into(),
            ephemeral: mode.ephemeral,
            sequential: mode.sequential,
        };
        match self.call(op).await? {
            ZnodeReply::Created { path, stat } => Ok((path, stat)),
            other => Err(unexpected(other)),
        }
    }

    /// Create `path` with `acl` (ZooKeeper's `create(path, data, acl,
    /// mode)`; [`ZkClient::create`] gives `world:anyone:cdrwa`). `auth`
    /// entries stand for this connection's identities.
    pub async fn create_with_acl(
        &self,
        path: &str,
        data: impl Into<Bytes>,
        mode: CreateMode,
        acl: Vec<Acl>,
    ) -> R<(String, Stat)> {
        let op = ZnodeOp::CreateWithAcl {
            path: path.into(),
            data: data.into(),
            ephemeral: mode.ephemeral,
            sequential: mode.sequential,
            acl,
        };
        match self.call(op).await? {
            ZnodeReply::Created { path, stat } => Ok((path, stat)),
            other => Err(unexpected(other)),
        }
    }

    /// The node's ACL and stat (needs READ or ADMIN; without ADMIN digest
    /// hashes read `x`).
    pub async fn get_acl(&self, path: &str) -> R<(Vec<Acl>, Stat)> {
        match self.call(ZnodeOp::GetAcl { path: path.into() }).await? {
            ZnodeReply::Acl { acl, stat } => Ok((acl, stat)),
            other => Err(unexpected(other)),
        }
    }

    /// Replace the node's ACL if its ACL version (`Stat::aversion`) is
    /// `version` (`None`: any); needs ADMIN. The new stat.
    pub async fn set_acl(&self, path: &str, acl: Vec<Acl>, version: Option<u32>) -> R<Stat> {
        let op = ZnodeOp::SetAcl {
            path: path.into(),
            acl,
            version,
        };
        match self.call(op).await? {
            ZnodeReply::AclSet(stat) => Ok(stat),
            other => Err(unexpected(other)),
        }
    }

    /// ZooKeeper's `addAuth`: `("digest", "user:password")` gives this
    /// client's connection the identity `digest:user:base64(sha1(..))`,
    /// kept for its later connections too.
    pub async fn add_auth(&self, scheme: &str, auth: &str) -> R<()> {
        let op = ZnodeOp::AddAuth {
            scheme: scheme.into(),
            auth: auth.into(),
        };
        match self.call(op).await? {
            ZnodeReply::AuthAdded => {
                let mut held = self.auths.held.lock().expect("no poisoning");
                if held.is_empty() {
                    self.auths.link.store(self.client.links(), Ordering::SeqCst);
                }
                held.push((scheme.into(), auth.into()));
                Ok(())
            }
            other => Err(unexpected(other)),
        }
    }

    /// Delete `path` if its version is `version` (`None`: any).
    pub async fn delete(&self, path: &str, version: Option<u32>) -> R<()> {
        let op = ZnodeOp::Delete {
            path: path.into(),
            version,
        };
        match self.call(op).await? {
            ZnodeReply::Deleted => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// The node's stat, `None` when absent; `watch` sets a data watch
    /// (fired by its creation, deletion or data change).
    pub async fn exists(&self, path: &str, watch: bool) -> R<Option<Stat>> {
        let op = ZnodeOp::Exists {
            path: path.into(),
            watch,
        };
        match self.call(op).await? {
            ZnodeReply::Exists(s) => {
                if watch {
                    let mzxid = s.map(|s| s.mzxid);
                    let path = path.to_string();
                    self.rewatch.note(Rewatch::Data { path, mzxid });
                }
                Ok(s)
            }
            other => Err(unexpected(other)),
        }
    }

    pub async fn get_data(&self, path: &str, watch: bool) -> R<(Bytes, Stat)> {
        let op = ZnodeOp::GetData {
            path: path.into(),
            watch,
        };
        match self.call(op).await? {
            ZnodeReply::Data { data, stat } => {
                if watch {
                    let (path, mzxid) = (path.to_string(), Some(stat.mzxid));
                    self.rewatch.note(Rewatch::Data { path, mzxid });
                }
                Ok((data, stat))
            }
            other => Err(unexpected(other)),
        }
    }

    /// Set the data if the version is `version` (`None`: any); the new stat.
    pub async fn set_data(
        &self,
        path: &str,
        data: impl Into<Bytes>,
        version: Option<u32>,
    ) -> R<Stat> {
        let op = ZnodeOp::SetData {
            path: path.into(),
            data: data.into(),
            version,
        };
        match self.call(op).await? {
            ZnodeReply::Set(stat) => Ok(stat),
            other => Err(unexpected(other)),
        }
    }

    /// The children's names, sorted; `watch` sets a child watch.
    pub async fn children(&self, path: &str, watch: bool) -> R<Vec<String>> {
        let op = ZnodeOp::GetChildren {
            path: path.into(),
            watch,
        };
        match self.call(op).await? {
            ZnodeReply::Children(names) => {
                if watch {
                    let (path, children) = (path.to_string(), names.clone());
                    self.rewatch.note(Rewatch::Child { path, children });
                }
                Ok(names)
            }
            other => Err(unexpected(other)),
        }
    }

    /// Wait until the serving server applied everything committed before
    /// this call (linearizable); the zxid reached.
    pub async fn sync(&self) -> R<u64> {
        match self.call(ZnodeOp::Sync).await? {
            ZnodeReply::Synced { zxid } => Ok(zxid),
            other => Err(unexpected(other)),
        }
    }

    /// Close the session: its ephemerals are deleted in one transaction
    /// (returned, in path order).
    pub async fn close(mut self) -> R<Vec<String>> {
        if let Some(h) = self.heartbeat.take() {
            h.0.abort();
        }
        match self.call(ZnodeOp::CloseSession).await? {
            ZnodeReply::Closed { deleted } => Ok(deleted),
            other => Err(unexpected(other)),
        }
    }
}

fn unexpected(r: ZnodeReply) -> ZkClientError {
    ZkClientError::Unexpected(format!("{r:?}"))
}

/// Treat an `OpError` as the client's error type (for callers that mix).
impl From<OpError> for ZkClientError {
    fn from(e: OpError) -> Self {
        ZkClientError::Client(ClientError::Op(e))
    }
}
