//! The client library.
//!
//! Two modes:
//! * **Direct** (default, the seeds' design): the client runs the protocol's
//!   coordinator itself (for ABD: query + write-back / store phases) and
//!   talks to every replica over one connection each. No server hop, and no
//!   single server whose loss stalls the client.
//! * **Proxy**: the client sends whole requests to one server, whose own
//!   coordinator runs them (what RESP and thin clients get). On a lost
//!   connection the next call fails over to the next endpoint.
//!
//! A [`Client`] is cheap to clone; clones share the connections, and calls
//! from many tasks are pipelined on them.

use crate::codec::{Frame, DEFAULT_MAX_FRAME};
use crate::driver::{Driver, Input, NodeInfo, ReplyTo};
use crate::link::{pump_link, LinkEnd};
use crate::net::{link_queue, spawn_writer, FrameReader, FrameTx};
use crate::storage::MemoryStorage;
use bytes::Bytes;
use quorumkv_core::protocol::abd::{self, Coordinator, CoordinatorConfig};
use quorumkv_core::protocol::{Protocol, ProtocolKind};
use quorumkv_core::{NodeId, OpError, Peer, Request, Response};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
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
    /// ABD: skip the write-back when the query quorum agrees on one tag.
    pub fast_read: bool,
    /// ABD: send each phase to a quorum only, falling back to all replicas.
    pub thrifty: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            mode: ClientMode::Direct,
            op_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            fast_read: true,
            thrifty: false,
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
}

#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

enum Inner {
    Direct {
        tx: mpsc::Sender<Input<abd::Msg>>,
        protocol: ProtocolKind,
        timeout: Duration,
        /// The driver and link tasks, stopped when the last clone goes.
        tasks: Vec<tokio::task::JoinHandle<()>>,
    },
    Proxy(ProxyConn),
}

impl Drop for Inner {
    /// The last clone of a client is gone: stop its tasks, which closes its
    /// connections (the driver owns the writers; the links own the readers).
    fn drop(&mut self) {
        match self {
            Inner::Direct { tasks, .. } => tasks.iter().for_each(|t| t.abort()),
            Inner::Proxy(p) => p.close(),
        }
    }
}

/// Open a connection and exchange HelloClient / Welcome.
async fn handshake<M: serde::de::DeserializeOwned + serde::Serialize + Send + 'static>(
    addr: SocketAddr,
    timeout: Duration,
) -> Result<(ServerHello, FrameReader, tokio::net::tcp::OwnedWriteHalf), ClientError> {
    let fut = async {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| ClientError::Connect(format!("{addr}: {e}")))?;
        let _ = stream.set_nodelay(true);
        let (rd, mut wr) = stream.into_split();
        let hello = crate::codec::encode_to_bytes::<M>(&Frame::HelloClient);
        tokio::io::AsyncWriteExt::write_all(&mut wr, &hello)
            .await
            .map_err(|e| ClientError::Connect(format!("{addr}: {e}")))?;
        let mut reader = FrameReader::new(rd, DEFAULT_MAX_FRAME);
        match reader.next::<M>().await {
            Ok(Frame::Welcome {
                node,
                protocol,
                members,
            }) => Ok((
                ServerHello {
                    addr,
                    node,
                    protocol,
                    members,
                },
                reader,
                wr,
            )),
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

/// Ask one server who it is (used by `cluster` readiness checks and INFO-like tools).
pub async fn probe(addr: SocketAddr, timeout: Duration) -> Result<ServerHello, ClientError> {
    handshake::<abd::Msg>(addr, timeout)
        .await
        .map(|(h, _, _)| h)
}

/// Resolve `host:port` endpoints, all by `deadline`.
async fn resolve(names: &[String], deadline: Instant) -> Result<Vec<SocketAddr>, ClientError> {
    let mut addrs = Vec::with_capacity(names.len());
    for name in names {
        addrs.push(resolve_endpoint(name, deadline).await?);
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
        let names: Vec<String> = endpoints.into_iter().map(|e| e.to_string()).collect();
        if names.is_empty() {
            return Err(ClientError::Connect("no endpoints given".into()));
        }
        let deadline = Instant::now() + cfg.connect_timeout;
        let endpoints = resolve(&names, deadline).await?;
        match cfg.mode {
            ClientMode::Direct => Self::connect_direct(endpoints, cfg, deadline).await,
            ClientMode::Proxy => {
                let conn = ProxyConn::new(endpoints, cfg.clone());
                conn.ensure_connected(deadline).await?;
                Ok(Client {
                    inner: Arc::new(Inner::Proxy(conn)),
                })
            }
        }
    }

    async fn connect_direct(
        endpoints: Vec<SocketAddr>,
        cfg: ClientConfig,
        deadline: Instant,
    ) -> Result<Client, ClientError> {
        let wait = deadline.saturating_duration_since(Instant::now());
        let attempts = endpoints.iter().map(|&a| handshake::<abd::Msg>(a, wait));
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
        if !hello.protocol.has_client_coordinator() {
            return Err(ClientError::Connect(format!(
                "protocol {} has no client-side coordinator; use proxy mode",
                hello.protocol
            )));
        }
        let id: u64 = rand::random::<u64>() | (1 << 63); // never collides with replica ids
        let ccfg = CoordinatorConfig {
            op_timeout: cfg.op_timeout,
            fast_read: cfg.fast_read,
            thrifty: cfg.thrifty,
            ..Default::default()
        };
        let core = Coordinator::new(id, hello.members.clone(), ccfg);
        let info = NodeInfo {
            id: NodeId::MAX,
            protocol: hello.protocol.to_string(),
            members: hello.members.clone(),
            budgets: Vec::new(),
        };
        let driver =
            Driver::new(core, info, Box::new(MemoryStorage)).expect("memory storage loads");
        let (tx, rx) = mpsc::channel(8192);
        let mut tasks = vec![tokio::spawn(driver.run(rx))];
        for (addr, r) in endpoints.iter().zip(results) {
            let link = keep_link::<Coordinator>(*addr, r.ok(), tx.clone(), cfg.connect_timeout);
            tasks.push(tokio::spawn(link));
        }
        Ok(Client {
            inner: Arc::new(Inner::Direct {
                tx,
                protocol: hello.protocol,
                timeout: cfg.op_timeout,
                tasks,
            }),
        })
    }

    pub async fn call(&self, req: Request) -> Result<Response, ClientError> {
        match &*self.inner {
            Inner::Direct { tx, timeout, .. } => {
                let (otx, orx) = oneshot::channel();
                tx.send(Input::Client {
                    req,
                    reply: ReplyTo::Local(otx),
                })
                .await
                .map_err(|_| ClientError::Disconnected)?;
                // The coordinator enforces the op timeout itself; this outer
                // bound only guards against a wedged driver.
                match tokio::time::timeout(*timeout + Duration::from_secs(1), orx).await {
                    Ok(Ok(resp)) => Ok(resp),
                    Ok(Err(_)) => Err(ClientError::Disconnected),
                    Err(_) => Err(ClientError::Op(OpError::Timeout { got: 0, need: 0 })),
                }
            }
            Inner::Proxy(p) => p.call(req).await,
        }
    }

    pub async fn get(&self, key: impl Into<Bytes>) -> Result<Option<Bytes>, ClientError> {
        match self.call(Request::Get { key: key.into() }).await? {
            Response::Value(v) => Ok(v),
            Response::Failed(e) => Err(e.into()),
            Response::Done => Err(ClientError::Op(OpError::Rejected(
                "server answered a get with a write result".into(),
            ))),
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

    /// The protocol the cluster runs (direct mode knows it from the hello).
    pub fn protocol(&self) -> Option<ProtocolKind> {
        match &*self.inner {
            Inner::Direct { protocol, .. } => Some(*protocol),
            Inner::Proxy(_) => None,
        }
    }
}

fn expect_done(r: Response) -> Result<(), ClientError> {
    match r {
        Response::Done => Ok(()),
        Response::Failed(e) => Err(e.into()),
        Response::Value(_) => Err(ClientError::Op(OpError::Rejected(
            "server answered a write with a value".into(),
        ))),
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

/// Keep the client-side coordinator's link to one replica, reconnecting
/// with backoff when it breaks.
async fn keep_link<P: Protocol + Send + 'static>(
    addr: SocketAddr,
    mut first: Option<(ServerHello, FrameReader, tokio::net::tcp::OwnedWriteHalf)>,
    tx: mpsc::Sender<Input<P::Msg>>,
    connect_timeout: Duration,
) {
    let mut backoff = Duration::from_millis(20);
    loop {
        let conn = match first.take() {
            Some(c) => Ok(c),
            None => handshake::<P::Msg>(addr, connect_timeout).await,
        };
        if let Ok((hello, mut reader, wr)) = conn {
            backoff = Duration::from_millis(20);
            let peer = Peer::Node(hello.node);
            let (ftx, writer) = spawn_writer::<P::Msg>(wr, link_queue());
            if tx.send(Input::LinkUp { peer, tx: ftx }).await.is_err() {
                return;
            }
            if let LinkEnd::DriverGone = pump_link::<P::Msg>(&mut reader, peer, &tx).await {
                return;
            }
            writer.abort();
            if tx.send(Input::LinkDown { peer }).await.is_err() {
                return;
            }
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

// -------------------------------------------------------------- proxy mode

/// Calls waiting for a response on one proxy link.
#[derive(Default)]
struct WaiterTable {
    pending: HashMap<u64, oneshot::Sender<Response>>,
    /// The link's reader has stopped: nothing will be answered any more.
    closed: bool,
}

type Waiters = Arc<Mutex<WaiterTable>>;

struct ProxyConn {
    endpoints: Vec<SocketAddr>,
    cfg: ClientConfig,
    state: tokio::sync::Mutex<ProxyState>,
}

#[derive(Default)]
struct ProxyState {
    next_endpoint: usize,
    link: Option<(FrameTx<abd::Msg>, Waiters)>,
    /// The task reading the current link's responses.
    reader: Option<tokio::task::JoinHandle<()>>,
    next_id: u64,
}

impl ProxyConn {
    fn new(endpoints: Vec<SocketAddr>, cfg: ClientConfig) -> Self {
        ProxyConn {
            endpoints,
            cfg,
            state: tokio::sync::Mutex::new(ProxyState::default()),
        }
    }

    /// Stop reading and drop the link (the writer then closes the socket).
    fn close(&self) {
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
    async fn ensure_connected(&self, deadline: Instant) -> Result<(), ClientError> {
        let mut st = self.state.lock().await;
        let alive = |(tx, w): &(FrameTx<abd::Msg>, Waiters)| {
            !tx.is_closed() && !w.lock().expect("no poisoning").closed
        };
        if st.link.as_ref().is_some_and(alive) {
            return Ok(());
        }
        let mut errors = Vec::new();
        let n = self.endpoints.len();
        for tried in 0..n {
            let addr = self.endpoints[st.next_endpoint % n];
            st.next_endpoint += 1;
            let share = deadline.saturating_duration_since(Instant::now()) / (n - tried) as u32;
            match handshake::<abd::Msg>(addr, share).await {
                Ok((_, mut reader, wr)) => {
                    let (ftx, _writer) = spawn_writer::<abd::Msg>(wr, link_queue());
                    let waiters: Waiters = Arc::default();
                    let w = waiters.clone();
                    let closer = ftx.clone();
                    if let Some(old) = st.reader.take() {
                        old.abort();
                    }
                    st.reader = Some(tokio::spawn(async move {
                        while let Ok(Frame::Response { id, resp }) = reader.next::<abd::Msg>().await
                        {
                            if let Some(s) = w.lock().expect("no poisoning").pending.remove(&id) {
                                let _ = s.send(resp);
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
                    return Ok(());
                }
                Err(e) => errors.push(e),
            }
        }
        Err(all_failed(errors))
    }

    async fn call(&self, req: Request) -> Result<Response, ClientError> {
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
            if ftx.send(Frame::Request { id, req }).is_err() {
                st.link = None;
                return Err(ClientError::Disconnected);
            }
            break;
        }
        match tokio::time::timeout(self.cfg.op_timeout + Duration::from_secs(1), orx).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(_)) => {
                self.state.lock().await.link = None;
                Err(ClientError::Disconnected)
            }
            Err(_) => Err(ClientError::Op(OpError::Timeout { got: 0, need: 0 })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
