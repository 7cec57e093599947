//! The coordination service's client (seed 001 §II.C, PROTOCOLS.md §7):
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
//! its ephemerals. [`ZkClient::close`] closes it at once. Watch events
//! arrive on [`ZkClient::watches`], one per fired watch, before the answer
//! to any later call.

use crate::client::{Client, ClientConfig, ClientError, ClientMode};
use bytes::Bytes;
use quorumkv_core::znode::op::{ZnodeOp, ZnodeReply};
use quorumkv_core::znode::{EventType, Stat, ZkError};
use quorumkv_core::{OpError, Request, Response};
use std::sync::Arc;
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
        let client = Client::connect(endpoints, cfg).await?;
        let mut zk = ZkClient {
            client,
            heartbeat: None,
        };
        let timeout_ms = session_timeout.as_millis() as u64;
        match zk.call(ZnodeOp::OpenSession { timeout_ms }).await? {
            ZnodeReply::Session { .. } => {}
            other => return Err(unexpected(other)),
        }
        let c = zk.client.clone();
        let every = (session_timeout / 3).max(Duration::from_millis(10));
        zk.heartbeat = Some(Arc::new(Heartbeat(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                // A lost ping is no news: the next one goes on time.
                let _ = c.call(Request::Znode(ZnodeOp::Ping)).await;
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
        tokio::spawn(async move {
            while let Some(e) = events.recv().await {
                let w = match (e.kind.as_str(), EventType::parse(&e.kind)) {
                    ("expired", _) => WatchEvent::SessionExpired,
                    (_, Some(event)) => WatchEvent::Node {
                        event,
                        path: String::from_utf8_lossy(&e.key).into_owned(),
                    },
                    _ => continue,
                };
                if tx.send(w).is_err() {
                    return;
                }
            }
        });
        Some(rx)
    }

    async fn call(&self, op: ZnodeOp) -> R<ZnodeReply> {
        match self.client.call(Request::Znode(op)).await? {
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
            ZnodeReply::Exists(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }

    pub async fn get_data(&self, path: &str, watch: bool) -> R<(Bytes, Stat)> {
        let op = ZnodeOp::GetData {
            path: path.into(),
            watch,
        };
        match self.call(op).await? {
            ZnodeReply::Data { data, stat } => Ok((data, stat)),
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
            ZnodeReply::Children(names) => Ok(names),
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
