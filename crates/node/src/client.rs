//! The client library.
//!
//! Two modes:
//! * **Direct** (default, the seeds' design): the client runs the protocol's
//!   coordinator itself (its quorum phases) and
//!   talks to every replica over one connection each. No server hop, and no
//!   single server whose loss stalls the client.
//! * **Proxy**: the client sends whole requests to one server, whose own
//!   coordinator runs them (what RESP and thin clients get). On a lost
//!   connection the next call fails over to the next endpoint.
//!
//! The client learns the protocol and its options from the servers' hello
//! and builds that protocol's coordinator from the core's registry; a
//! protocol without a client-side coordinator is reached through a server
//! (proxy) whatever the mode. Every operation gets an [`OpId`] that stays
//! the same when it is retried elsewhere (a `NotLeader` answer is followed
//! to the leader it names), and events a server pushes arrive on
//! [`Client::events`].
//!
//! A [`Client`] is cheap to clone; clones share the connections, and calls
//! from many tasks are pipelined on them. [`Client::close`] lets what it
//! sent last (a coordinator's UNLOCKs) reach the replicas before its
//! connections close; dropping the last clone does the same, best effort.
//!
//! Given fewer endpoints than replicas, a direct client dials the others
//! where their hello says they listen, or goes through a server
//! ([`learn`]).

mod learn;

pub use crate::auth::Credentials;
use crate::codec::{Frame, DEFAULT_MAX_FRAME};
use crate::driver::{Driver, Input, NodeInfo, ReplyTo};
use crate::heartbeat::{self, HeartbeatConfig};
use crate::link::{pump_link, LinkEnd};
use crate::net::{link_queue, spawn_writer, FrameReader, FrameTx};
use crate::storage::MemoryStorage;
use crate::stream::ConnWrite;
use crate::tls::ClientTls;
use bytes::Bytes;
use quorumkv_core::protocol::registry::client_writer_id;
use quorumkv_core::protocol::{
    ClientSpec, ProtocolDef, ProtocolKind, ProtocolOptions, Timing, Visitor,
};
use quorumkv_core::znode::tree::SESSION_BOUND;
use quorumkv_core::{Event, NodeId, OpError, OpId, Peer, Request, Response};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientMode {
    /// Run the coordinator in the client (client-driven).
    #[default]
    Direct,
    /// Let a server coordinate (proxy).
    Proxy,
}

impl std::str::FromStr for ClientMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "direct" => Ok(ClientMode::Direct),
            "proxy" => Ok(ClientMode::Proxy),
            _ => Err(format!("unknown client mode '{s}' (direct or proxy)")),
        }
    }
}

#[derive(Clone, Debug)]
pub struct ClientConfig {
    pub mode: ClientMode,
    /// An operation without a quorum fails with a timeout after this long.
    pub op_timeout: Duration,
    /// How long [`Client::connect`] may take in all (resolving names and
    /// trying every endpoint); also each later reconnection's bound.
    pub connect_timeout: Duration,
    /// Protocol options for the client's own coordinator, applied over the
    /// ones the servers announce (`--opt key=value`).
    pub options: Vec<(String, String)>,
    /// Proxy mode: when a server does not answer in time (or the connection
    /// breaks), send the same operation, under the same [`OpId`], to the
    /// next server, until `op_timeout`. Safe only when the protocol applies
    /// each `OpId` once; `None` = exactly when it says it does.
    pub retry_unanswered: Option<bool>,
    /// Connect over TLS, trusting this CA (and presenting a client
    /// certificate if it holds one); `None`: plain TCP.
    pub tls: Option<ClientTls>,
    /// Log in as this user on every connection (replicas with a users
    /// file require it); `None`: no login.
    pub credentials: Option<Credentials>,
    /// A client that goes through a server asks a replica this often where
    /// every replica listens now (etcd's `--auto-sync-interval`), so that it
    /// follows `quorumkv member update` while it is idle; `None`: only when
    /// it connects. (A direct client's links follow a move at once.)
    pub auto_sync: Option<Duration>,
}

/// [`ClientConfig::auto_sync`]'s default.
pub const AUTO_SYNC: Duration = Duration::from_secs(30);

/// How a connection is opened: over TLS or not, logging in or not.
#[derive(Clone, Debug, Default)]
struct Dialing {
    tls: Option<ClientTls>,
    credentials: Option<Credentials>,
}

impl ClientConfig {
    fn dialing(&self) -> Dialing {
        Dialing {
            tls: self.tls.clone(),
            credentials: self.credentials.clone(),
        }
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            mode: ClientMode::Direct,
            op_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            options: Vec::new(),
            retry_unanswered: None,
            tls: None,
            credentials: None,
            auto_sync: Some(AUTO_SYNC),
        }
    }
}

#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ClientError {
    #[error("cannot reach any replica: {0}")]
    Connect(String),
    #[error(transparent)]
    Op(#[from] OpError),
    #[error("connection to the server was lost; the operation may or may not have taken effect")]
    Disconnected,
    #[error("server refused the connection: {0}")]
    Refused(String),
}

impl ClientError {
    /// True when the operation certainly had no effect; false when its
    /// outcome is unknown (record it as such in histories).
    pub fn is_definite(&self) -> bool {
        match self {
            ClientError::Connect(_) | ClientError::Refused(_) => true,
            ClientError::Op(e) => e.is_definite(),
            ClientError::Disconnected => false,
        }
    }
}

/// What a server said about itself when we connected.
#[derive(Clone, Debug)]
pub struct ServerHello {
    pub addr: SocketAddr,
    pub node: NodeId,
    pub protocol: ProtocolKind,
    pub members: Vec<NodeId>,
    /// The protocol's options as the server runs them.
    pub options: Vec<(String, String)>,
    /// Every replica's native address, as the server's cluster file says.
    pub addrs: Vec<(NodeId, String)>,
    /// The logged-in user's role (`None`: the server has no users).
    pub role: Option<String>,
}

#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    shared: Arc<Shared>,
}

/// What every clone of a client shares besides its connections.
struct Shared {
    protocol: ProtocolKind,
    /// This client's id in every [`OpId`] (bit 63 set: never a node's).
    id: u64,
    next_seq: AtomicU64,
    /// Events pushed by servers, until [`Client::events`] takes them.
    events: Mutex<Option<mpsc::UnboundedReceiver<Event>>>,
    /// How the client reaches the cluster, when not as asked ([`learn`]).
    note: Option<String>,
}

/// The frame type of connections that carry no protocol messages.
type NoProto = ();

enum Inner {
    Direct {
        submit: Box<dyn Submit>,
        timeout: Duration,
        /// The driver and link tasks, until [`Client::close`] takes them.
        tasks: Mutex<DirectTasks>,
        /// Set when the client closes (or the last clone goes): each link
        /// lets its queued frames out, closes, and waits for the server
        /// to close its side.
        closing: watch::Sender<bool>,
    },
    Proxy(Box<ProxyConn>),
}

/// The tasks of a direct client.
#[derive(Default)]
struct DirectTasks {
    driver: Option<JoinHandle<()>>,
    links: Vec<JoinHandle<()>>,
}

/// How long a closing link waits for the server to close its side (it
/// does once it has handled everything the client sent).
const CLOSE_LINGER: Duration = Duration::from_millis(500);

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Hands a call to the client-side driver, whatever its message type.
trait Submit: Send + Sync {
    fn submit(
        &self,
        req: Request,
        op: OpId,
        reply: oneshot::Sender<Response>,
    ) -> BoxFuture<'_, bool>;
}

impl<M: Send + 'static> Submit for mpsc::Sender<Input<M>> {
    fn submit(
        &self,
        req: Request,
        op: OpId,
        reply: oneshot::Sender<Response>,
    ) -> BoxFuture<'_, bool> {
        let input = Input::Client {
            req,
            session: quorumkv_core::ClientRef::LOCAL,
            op,
            reply: ReplyTo::Local(reply),
        };
        Box::pin(async move { self.send(input).await.is_ok() })
    }
}

impl Drop for Inner {
    /// The last clone of a client is gone: stop the driver (it owns the
    /// writers' senders) and let each link close as [`Client::close`] does,
    /// in the background: best effort, as long as the runtime runs.
    fn drop(&mut self) {
        match self {
            Inner::Direct { tasks, closing, .. } => {
                closing.send_replace(true);
                let tasks = tasks.get_mut().expect("no poisoning");
                if let Some(d) = tasks.driver.take() {
                    d.abort();
                }
            }
            Inner::Proxy(p) => p.close(),
        }
    }
}

/// Where a client connects: an address, and the host it was dialled as
/// (what TLS verifies the server's certificate against).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Dial {
    addr: SocketAddr,
    host: String,
}

impl Dial {
    fn at(addr: SocketAddr) -> Dial {
        Dial {
            addr,
            host: addr.ip().to_string(),
        }
    }
}

/// A fresh connection after its hello: what the server said, the reader
/// and the writer.
pub(crate) type Opened = (ServerHello, FrameReader, ConnWrite);

/// Open a connection (TLS with `tls`), log in with the credentials if
/// any, and exchange HelloClient / Welcome.
async fn handshake(dial: Dial, timeout: Duration, how: Dialing) -> Result<Opened, ClientError> {
    let addr = dial.addr;
    let fut = async {
        let stream = crate::tls::dial(addr, &dial.host, how.tls.as_ref())
            .await
            .map_err(|e| ClientError::Connect(format!("{addr}: {e}")))?;
        let (rd, mut wr) = stream.split();
        let mut hello = Vec::new();
        if let Some(c) = &how.credentials {
            let auth = Frame::<NoProto>::Auth {
                user: c.user.clone(),
                password: c.password.clone(),
            };
            hello.extend_from_slice(&crate::codec::encode_to_bytes(&auth));
        }
        hello.extend_from_slice(&crate::codec::encode_to_bytes::<NoProto>(
            &Frame::hello_client(),
        ));
        crate::stream::write_flush(&mut wr, &hello)
            .await
            .map_err(|e| ClientError::Connect(format!("{addr}: {e}")))?;
        let mut reader = FrameReader::new(rd, DEFAULT_MAX_FRAME);
        match reader.next::<NoProto>().await {
            Ok(Frame::Welcome {
                node,
                protocol,
                members,
                options,
                addrs,
                role,
                version,
            }) => match crate::version::check(crate::version::Other::Server, version.as_ref()) {
                Err(why) => Err(ClientError::Refused(format!("{addr}: {why}"))),
                Ok(()) => Ok((
                    ServerHello {
                        addr,
                        node,
                        protocol,
                        members,
                        options,
                        addrs,
                        role,
                    },
                    reader,
                    wr,
                )),
            },
            Ok(Frame::Error { message }) => Err(ClientError::Refused(format!("{addr}: {message}"))),
            Ok(_) => Err(ClientError::Connect(format!(
                "{addr}: unexpected answer to hello (not a quorumkv server?)"
            ))),
            Err(e) => Err(ClientError::Connect(format!(
                "{addr}: {e} (not a quorumkv server?)"
            ))),
        }
    };
    tokio::time::timeout(timeout, fut)
        .await
        .unwrap_or_else(|_| {
            Err(ClientError::Connect(format!(
                "{addr}: no answer within {timeout:?}"
            )))
        })
}

/// Open one connection to the endpoint `name`, logging in with
/// `credentials` and saying hello, all within `timeout`: for a request
/// outside a [`Client`] (`quorumkv snapshot save`).
pub(crate) async fn open_one(
    name: &str,
    tls: Option<ClientTls>,
    credentials: Option<Credentials>,
    timeout: Duration,
) -> Result<Opened, ClientError> {
    let deadline = Instant::now() + timeout;
    let dial = resolve(&[name.to_string()], deadline).await?.remove(0);
    let left = deadline.saturating_duration_since(Instant::now());
    handshake(dial, left, Dialing { tls, credentials }).await
}

/// Ask one server who it is (used by `cluster` readiness checks and INFO-like tools).
pub async fn probe(addr: SocketAddr, timeout: Duration) -> Result<ServerHello, ClientError> {
    probe_with(addr, timeout, None).await
}

/// [`probe`] over TLS when `tls` is given (the server's certificate must
/// name `addr`'s IP address).
pub async fn probe_with(
    addr: SocketAddr,
    timeout: Duration,
    tls: Option<&ClientTls>,
) -> Result<ServerHello, ClientError> {
    let how = Dialing {
        tls: tls.cloned(),
        credentials: None,
    };
    let opened = handshake(Dial::at(addr), timeout, how).await;
    opened.map(|(h, _, _)| h)
}

/// Resolve `host:port` endpoints, all by `deadline`.
async fn resolve(names: &[String], deadline: Instant) -> Result<Vec<Dial>, ClientError> {
    let mut addrs = Vec::with_capacity(names.len());
    for name in names {
        let addr = resolve_endpoint(name, deadline).await?;
        let host = match name.parse::<SocketAddr>() {
            Ok(a) => a.ip().to_string(),
            Err(_) => crate::tls::host_of(name).to_string(),
        };
        addrs.push(Dial { addr, host });
    }
    Ok(addrs)
}

/// One `HOST:PORT` endpoint to one address, by `deadline`. A name with
/// several addresses (`localhost` is ::1 and 127.0.0.1) takes its first IPv4
/// one, since replicas listen on IPv4 by default and one replica must be one
/// connection. The one resolver of the client library and the CLI.
pub async fn resolve_endpoint(name: &str, deadline: Instant) -> Result<SocketAddr, ClientError> {
    if let Ok(addr) = name.parse() {
        return Ok(addr);
    }
    if !name.contains(':') {
        return Err(ClientError::Connect(format!(
            "{name}: no port (endpoints are HOST:PORT)"
        )));
    }
    let found = tokio::time::timeout_at(deadline, tokio::net::lookup_host(name))
        .await
        .map_err(|_| ClientError::Connect(format!("{name}: not resolved in time")))?
        .map_err(|e| ClientError::Connect(format!("{name}: cannot resolve: {e}")))?
        .collect::<Vec<_>>();
    let addr = found.iter().find(|a| a.is_ipv4()).or(found.first());
    addr.copied()
        .ok_or_else(|| ClientError::Connect(format!("{name}: no address found")))
}

/// One error for a connect that failed at every endpoint, naming them all.
fn all_failed(errors: Vec<ClientError>) -> ClientError {
    if errors.len() == 1 {
        return errors.into_iter().next().expect("one error");
    }
    let each: Vec<String> = errors
        .iter()
        .map(|e| match e {
            ClientError::Connect(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    ClientError::Connect(each.join("; "))
}

impl Client {
    /// Connect to a cluster. `endpoints` are `host:port` names or socket
    /// addresses; resolving and connecting take at most
    /// `cfg.connect_timeout` in all.
    pub async fn connect<E: ToString>(
        endpoints: impl IntoIterator<Item = E>,
        cfg: ClientConfig,
    ) -> Result<Client, ClientError> {
        // Bits 62 and 61 clear: not session-bound, and never an owner mark
        // of the znode tree (top byte 0xff, `znode::tree::reserved_owner`),
        // refused as a session.
        Self::connect_as(endpoints, cfg, client_writer_id(rand::random::<u64>() >> 3)).await
    }

    /// [`Client::connect`] for a client that works only inside the znode
    /// session it opens (`znode::tree::SESSION_BOUND`): once the session
    /// is gone, the servers refuse its writes, even those still on their
    /// way.
    pub async fn connect_session_bound<E: ToString>(
        endpoints: impl IntoIterator<Item = E>,
        cfg: ClientConfig,
    ) -> Result<Client, ClientError> {
        let id = client_writer_id((rand::random::<u64>() >> 3) | SESSION_BOUND);
        Self::connect_as(endpoints, cfg, id).await
    }

    async fn connect_as<E: ToString>(
        endpoints: impl IntoIterator<Item = E>,
        cfg: ClientConfig,
        id: u64,
    ) -> Result<Client, ClientError> {
        let names: Vec<String> = endpoints.into_iter().map(|e| e.to_string()).collect();
        if names.is_empty() {
            return Err(ClientError::Connect("no endpoints given".into()));
        }
        let deadline = Instant::now() + cfg.connect_timeout;
        let endpoints = resolve(&names, deadline).await?;
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (inner, protocol, note) = match cfg.mode {
            ClientMode::Direct => {
                Self::connect_direct(endpoints, &cfg, deadline, events_tx).await?
            }
            ClientMode::Proxy => {
                let mut conn = ProxyConn::new(endpoints, cfg.clone(), events_tx);
                // A fresh connection always says hello.
                let hello = conn.ensure_connected(deadline).await?;
                let protocol = hello.map_or_else(ProtocolKind::default_protocol, |h| h.protocol);
                conn.learn(protocol);
                (Inner::Proxy(Box::new(conn)), protocol, None)
            }
        };
        let shared = Shared {
            protocol,
            id,
            next_seq: AtomicU64::new(1),
            events: Mutex::new(Some(events_rx)),
            note,
        };
        let inner = Arc::new(inner);
        if let (Inner::Proxy(_), Some(every)) = (&*inner, cfg.auto_sync) {
            auto_sync(Arc::downgrade(&inner), every);
        }
        Ok(Client {
            inner,
            shared: Arc::new(shared),
        })
    }

    /// Direct mode: hello every endpoint, then run the protocol's
    /// coordinator here, with a link to every member (dialling those the
    /// endpoints miss, [`learn`]) — or, for a protocol without one or
    /// members that cannot be reached, go through the endpoints (proxy).
    async fn connect_direct(
        endpoints: Vec<Dial>,
        cfg: &ClientConfig,
        deadline: Instant,
        events: mpsc::UnboundedSender<Event>,
    ) -> Result<(Inner, ProtocolKind, Option<String>), ClientError> {
        let wait = deadline.saturating_duration_since(Instant::now());
        let attempts = (endpoints.iter()).map(|a| handshake(a.clone(), wait, cfg.dialing()));
        let results = futures_join_all(attempts).await;
        let mut errors = Vec::new();
        let mut hello = None;
        for r in &results {
            match r {
                Ok((h, _, _)) => {
                    hello.get_or_insert_with(|| h.clone());
                }
                Err(e) => errors.push(e.clone()),
            }
        }
        let Some(hello) = hello else {
            return Err(all_failed(errors));
        };
        let protocol = hello.protocol;
        let read_only = hello.role.as_deref() == Some(crate::auth::Role::Read.name());
        if !protocol.has_client_coordinator() || read_only {
            if read_only {
                tracing::info!(
                    "the user's role is read: going through a server (a client-side \
                     coordinator writes back what it reads)"
                );
            } else {
                tracing::info!(%protocol, "no client-side coordinator: going through a server");
            }
            let conn = Self::proxy_through(endpoints, cfg, deadline, events, protocol).await?;
            return Ok((conn, protocol, None));
        }
        let mut links: Vec<_> = endpoints.iter().cloned().zip(results).collect();
        let learned = learn::learn_members(&hello, &links, &cfg.dialing(), deadline).await;
        if learned.route == learn::Route::Proxy {
            let conn = Self::proxy_through(endpoints, cfg, deadline, events, protocol).await?;
            return Ok((conn, protocol, learned.note));
        }
        links.extend(learned.links);
        let build = BuildDirect {
            hello,
            links,
            cfg: cfg.clone(),
            events,
        };
        Ok((protocol.visit(build)?, protocol, learned.note))
    }

    async fn proxy_through(
        endpoints: Vec<Dial>,
        cfg: &ClientConfig,
        deadline: Instant,
        events: mpsc::UnboundedSender<Event>,
        protocol: ProtocolKind,
    ) -> Result<Inner, ClientError> {
        let mut conn = ProxyConn::new(endpoints, cfg.clone(), events);
        conn.ensure_connected(deadline).await?;
        conn.learn(protocol);
        Ok(Inner::Proxy(Box::new(conn)))
    }

    /// How this client reaches the cluster when it is not what was asked:
    /// the replicas it learned from an endpoint's hello, or that it goes
    /// through a server. One line, for the user (the CLI prints it).
    pub fn connect_note(&self) -> Option<&str> {
        self.shared.note.as_deref()
    }

    /// Close the client: every clone's calls fail from now on. A direct
    /// client's last frames (the UNLOCKs of its last operation) go out,
    /// then each connection closes, and each server has handled them once
    /// it closed its side, which is awaited for [`CLOSE_LINGER`] at most.
    /// So the next client to touch the same keys finds them free.
    pub async fn close(&self) {
        match &*self.inner {
            Inner::Direct { tasks, closing, .. } => {
                let tasks = std::mem::take(&mut *tasks.lock().expect("no poisoning"));
                closing.send_replace(true);
                if let Some(d) = tasks.driver {
                    d.abort();
                    let _ = d.await;
                }
                let until = Instant::now() + CLOSE_LINGER;
                for mut link in tasks.links {
                    if tokio::time::timeout_at(until, &mut link).await.is_err() {
                        link.abort();
                    }
                }
            }
            Inner::Proxy(p) => p.close(),
        }
    }

    /// A fresh operation id (the same one is used for every retry of it).
    fn next_op(&self) -> OpId {
        OpId {
            client: self.shared.id,
            seq: self.shared.next_seq.fetch_add(1, Ordering::Relaxed),
        }
    }

    pub async fn call(&self, req: Request) -> Result<Response, ClientError> {
        let op = self.next_op();
        match &*self.inner {
            Inner::Direct {
                submit, timeout, ..
            } => {
                let (otx, orx) = oneshot::channel();
                if !submit.submit(req, op, otx).await {
                    return Err(ClientError::Disconnected);
                }
                // The coordinator enforces the op timeout itself; this outer
                // bound only guards against a wedged driver.
                let bound = *timeout + Duration::from_secs(1);
                match tokio::time::timeout(bound, orx).await {
                    Ok(Ok(resp)) => Ok(resp),
                    Ok(Err(_)) => Err(ClientError::Disconnected),
                    Err(_) => Err(no_answer(bound)),
                }
            }
            Inner::Proxy(p) => p.call(req, op).await,
        }
    }

    pub async fn get(&self, key: impl Into<Bytes>) -> Result<Option<Bytes>, ClientError> {
        match self.call(Request::Get { key: key.into() }).await? {
            Response::Value(v) => Ok(v),
            Response::Failed(e) => Err(e.into()),
            other => Err(ClientError::Op(OpError::unknown(format!(
                "server answered a get with {other:?}"
            )))),
        }
    }

    pub async fn put(
        &self,
        key: impl Into<Bytes>,
        value: impl Into<Bytes>,
    ) -> Result<(), ClientError> {
        expect_done(
            self.call(Request::Put {
                key: key.into(),
                value: value.into(),
            })
            .await?,
        )
    }

    pub async fn delete(&self, key: impl Into<Bytes>) -> Result<(), ClientError> {
        expect_done(self.call(Request::Delete { key: key.into() }).await?)
    }

    /// This client's id: the `client` of its [`OpId`]s, and its session
    /// in the znode service.
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The protocol the cluster runs, as its servers said.
    pub fn protocol(&self) -> ProtocolKind {
        self.shared.protocol
    }

    /// Whether this client runs the protocol's coordinator itself (false:
    /// a server coordinates, by choice or because the protocol has none).
    pub fn is_direct(&self) -> bool {
        matches!(&*self.inner, Inner::Direct { .. })
    }

    /// How many connections a proxy client has made so far (0 for a
    /// client-side coordinator): when it changes, the server that serves
    /// this client changed, and what it held for the old connection
    /// (watches) is gone.
    pub fn links(&self) -> u64 {
        match &*self.inner {
            Inner::Proxy(p) => p.links.load(Ordering::SeqCst),
            Inner::Direct { .. } => 0,
        }
    }

    /// The events servers push to this client (watches, lock grants,
    /// session expiry). The first call takes the stream; later ones get `None`.
    pub fn events(&self) -> Option<mpsc::UnboundedReceiver<Event>> {
        self.shared.events.lock().expect("no poisoning").take()
    }
}

/// The unknown outcome of a call nobody answered in time.
fn no_answer(after: Duration) -> ClientError {
    ClientError::Op(OpError::unknown(format!("no answer within {after:?}")))
}

fn expect_done(r: Response) -> Result<(), ClientError> {
    match r {
        Response::Done => Ok(()),
        Response::Failed(e) => Err(e.into()),
        other => Err(ClientError::Op(OpError::unknown(format!(
            "server answered a write with {other:?}"
        )))),
    }
}

/// One hello per endpoint, as `connect_direct` made them.
type Handshake = Result<Opened, ClientError>;

/// Direct mode once the protocol's types are known: its coordinator in a
/// driver of our own, one kept link per replica.
struct BuildDirect {
    hello: ServerHello,
    links: Vec<(Dial, Handshake)>,
    cfg: ClientConfig,
    events: mpsc::UnboundedSender<Event>,
}

impl Visitor for BuildDirect {
    type Output = Result<Inner, ClientError>;
    fn visit<D: ProtocolDef>(self) -> Self::Output {
        let BuildDirect {
            hello,
            links,
            cfg,
            events,
        } = self;
        let mut opts = D::Options::from_pairs(&hello.options).map_err(ClientError::Refused)?;
        opts.apply(&cfg.options).map_err(ClientError::Connect)?;
        let spec = ClientSpec {
            writer_id: client_writer_id(rand::random::<u64>() >> 1),
            members: &hello.members,
            timing: Timing {
                op_timeout: cfg.op_timeout,
                ..Timing::default()
            },
            seed: rand::random(),
        };
        let core = D::client(&spec, &opts, None);
        let info = NodeInfo {
            id: NodeId::MAX,
            protocol: hello.protocol.to_string(),
            members: hello.members.clone(),
            budgets: Vec::new(),
        };
        let driver = Driver::new(core, info, Box::new(MemoryStorage::default()))
            .expect("memory storage loads")
            .with_local_events(events);
        let (tx, rx) = mpsc::channel::<Input<D::Msg>>(8192);
        let (closing, _) = watch::channel(false);
        let mut tasks = DirectTasks {
            driver: Some(tokio::spawn(driver.run(rx))),
            links: Vec::new(),
        };
        let book = Book::default();
        book.learn(&hello);
        for (addr, first) in links {
            let link = KeepLink {
                node: (first.as_ref().ok()).map(|(h, _, _)| h.node),
                addr,
                book: book.clone(),
                tx: tx.clone(),
                connect_timeout: cfg.connect_timeout,
                how: cfg.dialing(),
                closing: closing.subscribe(),
            };
            tasks.links.push(tokio::spawn(link.run(first.ok())));
        }
        Ok(Inner::Direct {
            submit: Box::new(tx),
            timeout: cfg.op_timeout,
            tasks: Mutex::new(tasks),
            closing,
        })
    }
}

/// Join futures without pulling in the `futures` crate.
async fn futures_join_all<F>(futs: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("handshake task does not panic"));
    }
    out
}

/// Where each replica listens, as the latest hello a direct client's
/// links got says (shared by them): a replica moved to another machine
/// (`quorumkv member update`) is dialled there.
#[derive(Clone, Default)]
struct Book(Arc<Mutex<HashMap<NodeId, Dial>>>);

impl Book {
    fn learn(&self, hello: &ServerHello) {
        let mut book = self.0.lock().expect("no poisoning");
        for (id, a) in &hello.addrs {
            if let Ok(a) = a.parse() {
                book.insert(*id, Dial::at(a));
            }
        }
    }

    fn get(&self, id: NodeId) -> Option<Dial> {
        self.0.lock().expect("no poisoning").get(&id).cloned()
    }

    /// Ask the replicas but `not` (one that answers is enough) where each
    /// listens now.
    async fn refresh(&self, not: NodeId, how: &Dialing, wait: Duration) {
        let others: Vec<Dial> = (self.0.lock().expect("no poisoning").iter())
            .filter(|(id, _)| **id != not)
            .map(|(_, d)| d.clone())
            .collect();
        for d in others {
            if let Ok((hello, _, _)) = handshake(d, wait, how.clone()).await {
                self.learn(&hello);
                return;
            }
        }
    }
}

/// From this backoff on, a link that cannot dial its replica asks the
/// others whether it moved.
const ASK_WHERE_AFTER: Duration = Duration::from_millis(320);

/// The client-side coordinator's link to one replica, kept up (with
/// backoff) until the client closes.
struct KeepLink<M> {
    /// The replica, once a hello named it.
    node: Option<NodeId>,
    addr: Dial,
    book: Book,
    tx: mpsc::Sender<Input<M>>,
    connect_timeout: Duration,
    how: Dialing,
    closing: watch::Receiver<bool>,
}

/// Why one connection of a [`KeepLink`] ended.
enum Ended {
    /// It broke: dial again.
    Broken,
    /// The client closed, or its driver is gone: stop.
    Stop,
}

/// Resolves once the client closes (or its last clone is gone).
async fn closed(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|c| *c).await;
}

impl<M: serde::Serialize + serde::de::DeserializeOwned + Send + 'static> KeepLink<M> {
    async fn run(mut self, mut first: Option<Opened>) {
        let mut backoff = Duration::from_millis(20);
        loop {
            let conn = match first.take() {
                Some(c) => Ok(c),
                None => tokio::select! {
                    c = handshake(self.addr.clone(), self.connect_timeout, self.how.clone()) => c,
                    () = closed(&mut self.closing) => return,
                },
            };
            match conn {
                Ok(opened) => {
                    backoff = Duration::from_millis(20);
                    self.node = Some(opened.0.node);
                    self.book.learn(&opened.0);
                    if let Ended::Stop = self.serve(opened).await {
                        return;
                    }
                }
                Err(_) if backoff >= ASK_WHERE_AFTER && self.moved().await => continue,
                Err(_) => {}
            }
            if self.tx.is_closed() {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = closed(&mut self.closing) => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// Whether the replica answers elsewhere now, as the others say (then
    /// dialled there).
    async fn moved(&mut self) -> bool {
        let Some(node) = self.node else { return false };
        self.book
            .refresh(node, &self.how, self.connect_timeout)
            .await;
        match self.book.get(node) {
            Some(d) if d.addr != self.addr.addr => {
                tracing::info!(replica = node, "dialling it at {} (moved)", d.addr);
                self.addr = d;
                true
            }
            _ => false,
        }
    }

    /// Carry one connection until it breaks or the client closes.
    async fn serve(&mut self, (hello, mut reader, wr): Opened) -> Ended {
        let peer = Peer::Node(hello.node);
        let (ftx, writer) = spawn_writer::<M>(wr, link_queue());
        heartbeat::start(&ftx, &mut reader, HeartbeatConfig::default());
        let up = Input::LinkUp {
            peer,
            tx: Some(ftx.clone()),
        };
        if self.tx.send(up).await.is_err() {
            return Ended::Stop;
        }
        let end = tokio::select! {
            end = pump_link::<M>(&mut reader, peer, &self.tx, None) => Some(end),
            () = closed(&mut self.closing) => None,
        };
        let Some(end) = end else {
            // Closing: the writer sends what is queued (the driver, which
            // holds the other sender, is stopped), then our FIN. The server
            // closes its side once it has handled all of it.
            drop(ftx);
            let _ = tokio::time::timeout(CLOSE_LINGER, async {
                let _ = writer.await;
                while reader.next::<M>().await.is_ok() {}
            })
            .await;
            return Ended::Stop;
        };
        if let LinkEnd::DriverGone = end {
            return Ended::Stop;
        }
        writer.abort();
        let down = Input::LinkDown {
            peer,
            tx: Some(ftx),
        };
        match self.tx.send(down).await {
            Ok(()) => Ended::Broken,
            Err(_) => Ended::Stop,
        }
    }
}

// -------------------------------------------------------------- proxy mode

/// The result of a call's last attempt, given whether an earlier attempt's
/// outcome was unknown (`uncertain`): a definite failure then becomes
/// unknown, since the earlier attempt may have been applied.
fn after_retries(
    uncertain: bool,
    last: Result<Response, ClientError>,
) -> Result<Response, ClientError> {
    let definite = match &last {
        Ok(Response::Failed(e)) => e.is_definite(),
        Ok(_) => false,
        Err(e) => e.is_definite(),
    };
    if !(uncertain && definite) {
        return last;
    }
    let why = match last {
        Ok(Response::Failed(e)) => e.to_string(),
        Err(e) => e.to_string(),
        Ok(_) => unreachable!("only failures are definite"),
    };
    Err(ClientError::Op(OpError::unknown(format!(
        "{why}, after an earlier attempt whose outcome is unknown"
    ))))
}

/// Calls waiting for a response on one proxy link.
#[derive(Default)]
struct WaiterTable {
    pending: HashMap<u64, oneshot::Sender<Response>>,
    /// The link's reader has stopped: nothing will be answered any more.
    closed: bool,
}

type Waiters = Arc<Mutex<WaiterTable>>;

struct ProxyConn {
    cfg: ClientConfig,
    /// Whether an unanswered call is retried elsewhere ([`ClientConfig::retry_unanswered`]).
    retry: bool,
    events: mpsc::UnboundedSender<Event>,
    state: tokio::sync::Mutex<ProxyState>,
    /// Connections made so far (a change means another server, or the
    /// same one again: what a server held for the old one is gone).
    links: AtomicU64,
    /// Set by [`ProxyConn::close`]: the auto-sync stops.
    closed: AtomicBool,
}

struct ProxyState {
    /// Where to connect, in order of preference; `NotLeader` hints add to it.
    endpoints: Vec<Dial>,
    next_endpoint: usize,
    /// Replica id → native address, from the servers' hellos.
    addrs: HashMap<NodeId, Dial>,
    link: Option<(FrameTx<NoProto>, Waiters)>,
    /// The task reading the current link's responses.
    reader: Option<tokio::task::JoinHandle<()>>,
    next_id: u64,
}

impl ProxyState {
    /// Where each replica listens, as `hello` says. A replica moved to
    /// another machine (`member update`) is reached there when the
    /// endpoints given fail: the addresses a hello names come after them,
    /// as etcd's clients sync their endpoints from the member list. Its
    /// old address is dropped (it would only cost a failed dial).
    fn learn_addrs(&mut self, hello: &ServerHello) {
        for (id, a) in &hello.addrs {
            let Ok(a) = a.parse() else { continue };
            let dial = Dial::at(a);
            let old = self.addrs.insert(*id, dial.clone());
            if let Some(old) = old.filter(|o| o.addr != dial.addr) {
                self.endpoints.retain(|e| e.addr != old.addr);
            }
            if !self.endpoints.iter().any(|e| e.addr == dial.addr) {
                self.endpoints.push(dial);
            }
        }
    }

    /// Every address known, the replicas' first.
    fn known(&self) -> Vec<Dial> {
        let mut all: Vec<Dial> = self.addrs.values().cloned().collect();
        for e in &self.endpoints {
            if !all.iter().any(|d| d.addr == e.addr) {
                all.push(e.clone());
            }
        }
        all
    }
}

/// Every `every`, ask a replica where each replica listens now, until the
/// client closes or is gone ([`ClientConfig::auto_sync`]).
fn auto_sync(client: std::sync::Weak<Inner>, every: Duration) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(inner) = client.upgrade() else {
                return;
            };
            let Inner::Proxy(p) = &*inner else { return };
            if p.closed.load(Ordering::SeqCst) {
                return;
            }
            p.sync_addrs().await;
        }
    });
}

/// How many `NotLeader` answers one call follows before giving up.
const MAX_REDIRECTS: u32 = 8;

impl ProxyConn {
    fn new(endpoints: Vec<Dial>, cfg: ClientConfig, events: mpsc::UnboundedSender<Event>) -> Self {
        let state = ProxyState {
            endpoints,
            next_endpoint: 0,
            addrs: HashMap::new(),
            link: None,
            reader: None,
            next_id: 0,
        };
        ProxyConn {
            retry: cfg.retry_unanswered.unwrap_or(false),
            cfg,
            events,
            state: tokio::sync::Mutex::new(state),
            links: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// The cluster runs `protocol`: retry unanswered calls if it deduplicates.
    fn learn(&mut self, protocol: ProtocolKind) {
        let dedup = protocol.info().deduplicates_requests;
        self.retry = self.cfg.retry_unanswered.unwrap_or(dedup);
    }

    /// Stop reading and drop the link (the writer then closes the socket).
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Ok(mut st) = self.state.try_lock() {
            if let Some(r) = st.reader.take() {
                r.abort();
            }
            st.link = None;
        }
    }

    /// Connect to the next reachable endpoint unless connected, by
    /// `deadline`: each endpoint tried gets an equal share of what is left,
    /// so a silent one cannot use up the time of the others.
    async fn ensure_connected(
        &self,
        deadline: Instant,
    ) -> Result<Option<ServerHello>, ClientError> {
        let mut st = self.state.lock().await;
        let alive = |(tx, w): &(FrameTx<NoProto>, Waiters)| {
            !tx.is_closed() && !w.lock().expect("no poisoning").closed
        };
        if st.link.as_ref().is_some_and(alive) {
            return Ok(None);
        }
        let mut errors = Vec::new();
        let n = st.endpoints.len();
        for tried in 0..n {
            let addr = st.endpoints[st.next_endpoint % n].clone();
            let share = deadline.saturating_duration_since(Instant::now()) / (n - tried) as u32;
            match handshake(addr, share, self.cfg.dialing()).await {
                Ok((hello, reader, wr)) => {
                    self.use_link(&mut st, &hello, reader, wr);
                    return Ok(Some(hello));
                }
                Err(e) => errors.push(e),
            }
            st.next_endpoint += 1;
        }
        Err(all_failed(errors))
    }

    /// Learn where every replica listens from the first known address
    /// that answers a hello (a connection of its own, closed at once).
    async fn sync_addrs(&self) {
        let known = self.state.lock().await.known();
        for d in known {
            if self.closed.load(Ordering::SeqCst) {
                return;
            }
            let wait = self.cfg.connect_timeout;
            if let Ok((hello, _, _)) = handshake(d, wait, self.cfg.dialing()).await {
                self.state.lock().await.learn_addrs(&hello);
                return;
            }
        }
    }

    /// Make a fresh connection the link: a task reads its responses (and
    /// pushed events) until it closes.
    fn use_link(
        &self,
        st: &mut ProxyState,
        hello: &ServerHello,
        mut reader: FrameReader,
        wr: ConnWrite,
    ) {
        st.learn_addrs(hello);
        let (ftx, _writer) = spawn_writer::<NoProto>(wr, link_queue());
        let waiters: Waiters = Arc::default();
        let (w, closer, events) = (waiters.clone(), ftx.clone(), self.events.clone());
        if let Some(old) = st.reader.take() {
            old.abort();
        }
        st.reader = Some(tokio::spawn(async move {
            loop {
                match reader.next::<NoProto>().await {
                    Ok(Frame::Response { id, resp }) => {
                        if let Some(s) = w.lock().expect("no poisoning").pending.remove(&id) {
                            let _ = s.send(resp);
                        }
                    }
                    Ok(Frame::Notify(event)) => drop(events.send(event)),
                    _ => break,
                }
            }
            // Dropping the waiters' senders fails their calls with
            // Disconnected; later calls see `closed` and reconnect.
            let mut table = w.lock().expect("no poisoning");
            table.closed = true;
            table.pending.clear();
            drop(table);
            drop(closer);
        }));
        st.link = Some((ftx, waiters));
        self.links.fetch_add(1, Ordering::SeqCst);
    }

    /// Run `req` at a server, following `NotLeader` answers to the leader
    /// they name (or to the next endpoint) with the same operation id, a
    /// few times, within the operation timeout.
    async fn call(&self, req: Request, op: OpId) -> Result<Response, ClientError> {
        let until = Instant::now() + self.cfg.op_timeout;
        let mut backoff = Duration::from_millis(5);
        // Set once an attempt's outcome is unknown: that attempt may still
        // apply, so no later answer can make the call a definite failure.
        let mut uncertain = false;
        for _ in 0..MAX_REDIRECTS {
            // Retrying: each attempt gets a share of the time, so that a
            // dead server leaves time for the next one.
            let wait = match self.retry {
                true => (self.cfg.op_timeout / 3).max(Duration::from_millis(50)),
                false => self.cfg.op_timeout + Duration::from_secs(1),
            };
            let resp = match self.call_once(req.clone(), op, wait).await {
                Err(ClientError::Disconnected | ClientError::Op(OpError::Unknown { .. }))
                    if self.retry && Instant::now() + backoff < until =>
                {
                    // Unknown outcome: the same OpId elsewhere is applied
                    // at most once by a protocol that deduplicates.
                    uncertain = true;
                    self.redirect(None).await;
                    continue;
                }
                other => after_retries(uncertain, other)?,
            };
            let Response::Failed(OpError::NotLeader { hint }) = resp else {
                return Ok(resp);
            };
            if Instant::now() + backoff >= until {
                let last = Ok(Response::Failed(OpError::NotLeader { hint }));
                return after_retries(uncertain, last);
            }
            self.redirect(hint).await;
            // An election may be under way: do not spin on it.
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(200));
        }
        after_retries(
            uncertain,
            Err(ClientError::Op(OpError::NotLeader { hint: None })),
        )
    }

    /// Point the next connection at replica `hint` (or the next endpoint).
    async fn redirect(&self, hint: Option<NodeId>) {
        let mut st = self.state.lock().await;
        let target = hint.and_then(|h| st.addrs.get(&h).cloned());
        match target {
            Some(addr) => {
                let i = match st.endpoints.iter().position(|a| a.addr == addr.addr) {
                    Some(i) => i,
                    None => {
                        st.endpoints.push(addr);
                        st.endpoints.len() - 1
                    }
                };
                st.next_endpoint = i;
            }
            None => st.next_endpoint += 1,
        }
        st.link = None;
        if let Some(r) = st.reader.take() {
            r.abort();
        }
    }

    async fn call_once(
        &self,
        req: Request,
        op: OpId,
        bound: Duration,
    ) -> Result<Response, ClientError> {
        let (otx, orx) = oneshot::channel();
        let mut otx = Some(otx);
        // A link found dead before the request went out is replaced, once:
        // nothing was sent, so retrying cannot apply the request twice.
        for attempt in 0..2 {
            self.ensure_connected(Instant::now() + self.cfg.connect_timeout)
                .await?;
            let mut st = self.state.lock().await;
            st.next_id += 1;
            let id = st.next_id;
            let Some((ftx, waiters)) = st.link.clone() else {
                return Err(ClientError::Disconnected);
            };
            {
                let mut table = waiters.lock().expect("no poisoning");
                if table.closed {
                    st.link = None;
                    if attempt == 0 {
                        continue;
                    }
                    return Err(ClientError::Disconnected);
                }
                table.pending.insert(id, otx.take().expect("sent once"));
            }
            let req = req.clone();
            if ftx.send(Frame::Request { id, op, req }).is_err() {
                st.link = None;
                return Err(ClientError::Disconnected);
            }
            break;
        }
        match tokio::time::timeout(bound, orx).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(_)) => {
                self.state.lock().await.link = None;
                Err(ClientError::Disconnected)
            }
            Err(_) => Err(no_answer(bound)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hello naming each replica at `addrs` (replica i+1 at addrs[i]).
    fn hello_naming(addrs: &[&str]) -> ServerHello {
        ServerHello {
            addr: "127.0.0.1:1".parse().unwrap(),
            node: 1,
            protocol: "zab".parse().unwrap(),
            members: vec![1, 2, 3],
            options: Vec::new(),
            addrs: (1..).zip(addrs.iter().map(|a| a.to_string())).collect(),
            role: None,
        }
    }

    #[test]
    fn a_moved_replica_is_dialled_at_its_new_address_and_not_the_old() {
        let given = |a: &str| Dial::at(a.parse().unwrap());
        let mut st = ProxyState {
            // The third is no replica's own address (a proxy in front).
            endpoints: ["10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.7:7001"]
                .map(given)
                .into(),
            next_endpoint: 0,
            addrs: HashMap::new(),
            link: None,
            reader: None,
            next_id: 0,
        };
        let ends = |st: &ProxyState| -> Vec<String> {
            st.endpoints.iter().map(|d| d.addr.to_string()).collect()
        };
        let at = ["10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.3:7001"];
        st.learn_addrs(&hello_naming(&at));
        let first = [
            "10.0.0.1:7001",
            "10.0.0.2:7001",
            "10.0.0.7:7001",
            "10.0.0.3:7001",
        ];
        assert_eq!(ends(&st), first);
        // Server 2 moved: its old address goes, the new one comes last;
        // server 3's word is unchanged; a name that is no socket address
        // (an `advertise` host name) is skipped.
        let mut moved = hello_naming(&["10.0.0.1:7001", "10.0.0.9:7001", "10.0.0.3:7001"]);
        moved.addrs.push((4, "spare.example:7001".into()));
        st.learn_addrs(&moved);
        let then = [
            "10.0.0.1:7001",
            "10.0.0.7:7001",
            "10.0.0.3:7001",
            "10.0.0.9:7001",
        ];
        assert_eq!(ends(&st), then);
        assert_eq!(st.addrs[&2].addr.to_string(), "10.0.0.9:7001");
        assert!(!st.addrs.contains_key(&4));
        // The replicas' addresses are asked first, then what else was
        // given, each once.
        let known: Vec<String> = st.known().iter().map(|d| d.addr.to_string()).collect();
        assert_eq!(known.last().map(String::as_str), Some("10.0.0.7:7001"));
        let mut sorted = known.clone();
        sorted.sort();
        let all = [
            "10.0.0.1:7001",
            "10.0.0.3:7001",
            "10.0.0.7:7001",
            "10.0.0.9:7001",
        ];
        assert_eq!(sorted, all);
    }

    /// A fake server that says hello, reads one request, then either drops
    /// the connection unanswered (`answer` = None) or answers it.
    async fn one_request_server(answer: Option<Response>) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let (rd, mut wr) = crate::stream::Conn::from(stream).split();
            let mut reader = FrameReader::new(rd, DEFAULT_MAX_FRAME);
            assert!(matches!(
                reader.next::<()>().await,
                Ok(Frame::HelloClient { .. })
            ));
            let welcome = Frame::<()>::Welcome {
                node: 1,
                protocol: "abd".parse().unwrap(),
                members: vec![1, 2],
                options: Vec::new(),
                addrs: Vec::new(),
                role: None,
                version: None, // an older replica
            };
            let bytes = crate::codec::encode_to_bytes(&welcome);
            tokio::io::AsyncWriteExt::write_all(&mut wr, &bytes)
                .await
                .unwrap();
            let Ok(Frame::Request { id, .. }) = reader.next::<()>().await else {
                panic!("expected a request");
            };
            if let Some(resp) = answer {
                let bytes = crate::codec::encode_to_bytes::<()>(&Frame::Response { id, resp });
                tokio::io::AsyncWriteExt::write_all(&mut wr, &bytes)
                    .await
                    .unwrap();
                // Keep the connection until the client is done with it.
                let _ = reader.next::<()>().await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_refusal_after_an_unanswered_attempt_is_unknown() {
        let silent = one_request_server(None).await;
        let refuses = one_request_server(Some(Response::Failed(OpError::refused("busy")))).await;
        let cfg = ClientConfig {
            mode: ClientMode::Proxy,
            op_timeout: Duration::from_secs(3),
            retry_unanswered: Some(true),
            ..Default::default()
        };
        let c = Client::connect([silent, refuses], cfg).await.unwrap();
        let err = c.put("k", "v").await.unwrap_err();
        // The first server may have applied the write before it went away.
        assert!(!err.is_definite(), "{err:?}");
        assert!(err.to_string().contains("busy"), "{err}");
    }

    #[tokio::test]
    async fn a_refusal_on_the_first_attempt_stays_definite() {
        let refuses = one_request_server(Some(Response::Failed(OpError::refused("busy")))).await;
        let cfg = ClientConfig {
            mode: ClientMode::Proxy,
            retry_unanswered: Some(true),
            ..Default::default()
        };
        let c = Client::connect([refuses], cfg).await.unwrap();
        let err = c.put("k", "v").await.unwrap_err();
        assert!(err.is_definite(), "{err:?}");
    }

    #[test]
    fn after_retries_keeps_successes_and_unknowns() {
        let done = after_retries(true, Ok(Response::Done));
        assert_eq!(done, Ok(Response::Done));
        let refused = Err(ClientError::Refused("x".into()));
        assert!(!after_retries(true, refused.clone())
            .unwrap_err()
            .is_definite());
        assert!(after_retries(false, refused).unwrap_err().is_definite());
    }

    #[tokio::test]
    async fn host_names_resolve_and_bad_ones_say_why() {
        let by = Instant::now() + Duration::from_secs(5);
        assert_eq!(
            resolve_endpoint("127.0.0.1:7001", by).await.unwrap().port(),
            7001
        );
        let local = resolve_endpoint("localhost:7001", by).await.unwrap();
        assert_eq!(local.port(), 7001);
        assert!(local.is_ipv4() && local.ip().is_loopback());
        let no_port = resolve_endpoint("localhost", by).await.unwrap_err();
        assert!(no_port.to_string().contains("no port"), "{no_port}");
        let bad = resolve_endpoint("no-such-host.invalid:1", by)
            .await
            .unwrap_err();
        assert!(bad.to_string().contains("cannot resolve"), "{bad}");
    }
}
