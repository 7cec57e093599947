//! A replica process: the native port (peers and clients), links to the
//! other replicas, and one [`Driver`] running the protocol core. The RESP
//! port is `resp_server`, the metrics port `metrics_http`.
//!
//! Links: replica `i` dials every replica `j < i` and keeps that one TCP
//! connection for traffic in both directions, redialling with backoff when it
//! breaks. So every pair of replicas shares exactly one connection.

use crate::budget::Budget;
use crate::codec::{Frame, DEFAULT_MAX_FRAME};
use crate::config::{ClusterFile, Limits};
use crate::driver::{pump_link, Batcher, Driver, DriverGone, Input, LinkEnd, NodeInfo, ReplyTo};
use crate::net::{
    link_queue, spawn_writer, ConnLimits, FrameReader, ReadError, ReadTimeouts,
    DEFAULT_MAX_QUEUED_BYTES, MIN_READ_BUF,
};
use crate::storage::MemoryStorage;
use anyhow::Context;
use quorumkv_core::protocol::abd::{AbdNode, CoordinatorConfig};
use quorumkv_core::protocol::{Protocol, ProtocolKind};
use quorumkv_core::{NodeId, Peer};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};

/// Everything a replica needs to start.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub id: NodeId,
    pub cluster: ClusterFile,
    /// How long the server's own (proxy) coordinator waits for a quorum.
    pub op_timeout: Duration,
    /// ABD: skip the write-back when the query quorum agrees.
    pub fast_read: bool,
    /// ABD: the proxy coordinator sends each phase to a quorum only.
    pub thrifty: bool,
    pub max_frame: usize,
    /// Most client connections served at once per port.
    pub max_connections: usize,
    /// This replica restarted without its state: catch up from peers
    /// before answering queries (seed 002's recovery mode `r`).
    pub recover: bool,
    /// Bytes all client connections of one port may hold together in read
    /// buffers and queued replies (each port has its own).
    pub buffer_budget: usize,
    /// Most bytes of replies queued for one client connection.
    pub max_queued_bytes: usize,
    /// Client connections: a request must arrive whole within this long.
    pub read_timeout: Option<Duration>,
    /// Client connections: closed after this long without a request.
    pub idle_timeout: Option<Duration>,
}

/// Defaults of the client connection limits (`quorumkv server --help`).
pub const DEFAULT_BUFFER_BUDGET: usize = 256 * 1024 * 1024;
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

impl ServerOptions {
    /// Defaults, then the cluster file's `[limits]` (if valid).
    pub fn new(id: NodeId, cluster: ClusterFile) -> Self {
        let limits = cluster.limits.as_ref().and_then(|l| l.parse().ok());
        let mut opts = ServerOptions {
            id,
            cluster,
            op_timeout: Duration::from_secs(2),
            fast_read: true,
            thrifty: false,
            max_frame: DEFAULT_MAX_FRAME,
            max_connections: 4096,
            recover: false,
            buffer_budget: DEFAULT_BUFFER_BUDGET,
            max_queued_bytes: DEFAULT_MAX_QUEUED_BYTES,
            read_timeout: Some(DEFAULT_READ_TIMEOUT),
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
        };
        if let Some(l) = limits {
            opts.apply_limits(&l);
        }
        opts
    }

    /// Take the limits that `l` sets; keep the others.
    pub fn apply_limits(&mut self, l: &Limits) {
        self.buffer_budget = l.max_buffer_bytes.unwrap_or(self.buffer_budget);
        self.max_queued_bytes = l.max_queued_bytes.unwrap_or(self.max_queued_bytes);
        self.read_timeout = l.read_timeout.unwrap_or(self.read_timeout);
        self.idle_timeout = l.idle_timeout.unwrap_or(self.idle_timeout);
    }

    /// Limits of one port's client connections; `max_request` is the
    /// largest request its protocol accepts.
    pub fn conn_limits(&self, max_request: usize) -> ConnLimits {
        ConnLimits {
            budget: Budget::new(self.buffer_budget),
            max_input: max_request,
            max_queued: self.max_queued_bytes,
            timeouts: ReadTimeouts {
                read: self.read_timeout,
                idle: self.idle_timeout,
            },
        }
    }
}

/// Bound listeners, so "address in use" is reported before anything starts.
pub struct Listeners {
    pub native: TcpListener,
    pub resp: Option<TcpListener>,
    pub metrics: Option<TcpListener>,
}

impl Listeners {
    pub async fn bind(opts: &ServerOptions) -> anyhow::Result<Listeners> {
        let me = opts
            .cluster
            .replica(opts.id)
            .with_context(|| format!("replica id {} is not in the cluster file", opts.id))?;
        let native = TcpListener::bind(me.addr)
            .await
            .with_context(|| format!("cannot listen on {} (native port)", me.addr))?;
        let resp = match me.resp {
            Some(a) => Some(
                TcpListener::bind(a)
                    .await
                    .with_context(|| format!("cannot listen on {a} (RESP port)"))?,
            ),
            None => None,
        };
        let metrics = match me.metrics {
            Some(a) => Some(
                TcpListener::bind(a)
                    .await
                    .with_context(|| format!("cannot listen on {a} (metrics port)"))?,
            ),
            None => None,
        };
        Ok(Listeners {
            native,
            resp,
            metrics,
        })
    }
}

/// Run a replica until `shutdown` resolves.
pub async fn run(
    opts: ServerOptions,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let members = opts.cluster.members();
    match opts.cluster.protocol {
        ProtocolKind::Abd => {
            let cfg = CoordinatorConfig {
                op_timeout: opts.op_timeout,
                fast_read: opts.fast_read,
                thrifty: opts.thrifty,
                ..Default::default()
            };
            // A fresh writer id per boot: a restarted replica has forgotten
            // the tags it issued, so reusing its node id could give one tag
            // two values (found by `quorumkv sim`). Client ids have bit 63
            // set; these never do.
            let writer = (u64::from(rand::random::<u32>()) << 8) | u64::from(opts.id);
            let mut core = AbdNode::new(opts.id, members, false, cfg).with_writer(writer);
            if opts.recover {
                core = core.recovering();
            }
            run_core(core, opts, listeners, shutdown).await
        }
    }
}

async fn run_core<P: Protocol + Send + 'static>(
    core: P,
    opts: ServerOptions,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let native_limits = opts.conn_limits(4 + opts.max_frame);
    // RESP: a command with a value of the largest frame, plus its framing.
    let resp_limits = opts.conn_limits(opts.max_frame + MIN_READ_BUF);
    let mut budgets = vec![("native", native_limits.budget.clone())];
    if listeners.resp.is_some() {
        budgets.push(("resp", resp_limits.budget.clone()));
    }
    let info = NodeInfo {
        id: opts.id,
        protocol: opts.cluster.protocol.to_string(),
        members: opts.cluster.members(),
        budgets,
    };
    let driver = Driver::new(core, info, Box::new(MemoryStorage)).context("cannot load storage")?;
    let (tx, rx) = mpsc::channel::<Input<P::Msg>>(8192);
    let driver_task = tokio::spawn(driver.run(rx));
    let opts = Arc::new(opts);
    let conn_ids = Arc::new(AtomicU64::new(1));

    let mut tasks = vec![tokio::spawn(accept_native::<P>(
        listeners.native,
        tx.clone(),
        opts.clone(),
        conn_ids.clone(),
        native_limits,
    ))];
    if let Some(l) = listeners.resp {
        tasks.push(tokio::spawn(crate::resp_server::accept_resp::<P>(
            l,
            tx.clone(),
            opts.clone(),
            resp_limits,
        )));
    }
    if let Some(l) = listeners.metrics {
        tasks.push(tokio::spawn(crate::metrics_http::accept_metrics::<P>(
            l,
            tx.clone(),
        )));
    }
    for r in opts.cluster.replicas.iter().filter(|r| r.id < opts.id) {
        tasks.push(tokio::spawn(dial_peer::<P>(
            r.id,
            r.addr,
            tx.clone(),
            opts.clone(),
        )));
    }
    tasks.push(tokio::spawn(crate::trim::trim_periodically()));
    drop(tx);
    tracing::info!(id = opts.id, protocol = %opts.cluster.protocol, "replica started");
    shutdown.await;
    tracing::info!(id = opts.id, "shutting down");
    for t in tasks {
        t.abort();
    }
    driver_task.abort();
    Ok(())
}

async fn accept_native<P: Protocol + Send + 'static>(
    listener: TcpListener,
    tx: mpsc::Sender<Input<P::Msg>>,
    opts: Arc<ServerOptions>,
    conn_ids: Arc<AtomicU64>,
    limits: ConnLimits,
) {
    let max = opts.max_connections;
    let serve = move |stream: TcpStream, addr: SocketAddr| {
        let conn = conn_ids.fetch_add(1, Ordering::Relaxed);
        let (tx, opts, limits) = (tx.clone(), opts.clone(), limits.clone());
        async move {
            if let Err(e) = serve_native::<P>(stream, conn, tx, &opts, &limits).await {
                tracing::debug!(%addr, "native connection ended: {e}");
            }
        }
    };
    accept_limited(listener, max, serve, |s| {
        refuse_native::<P>(s, "too many connections")
    })
    .await;
}

/// Accept connections forever, serving at most `max` at once: each accepted
/// stream is served by the future `serve` makes (holding a permit until it
/// ends); past the limit, `refuse` answers it instead. Accept errors (e.g.
/// out of file descriptors) are logged and retried after a pause.
pub(crate) async fn accept_limited<S, SF, R, RF>(
    listener: TcpListener,
    max: usize,
    mut serve: S,
    mut refuse: R,
) where
    S: FnMut(TcpStream, SocketAddr) -> SF,
    SF: Future<Output = ()> + Send + 'static,
    R: FnMut(TcpStream) -> RF,
    RF: Future<Output = ()> + Send + 'static,
{
    let limit = Arc::new(Semaphore::new(max));
    loop {
        let (stream, addr) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        match limit.clone().try_acquire_owned() {
            Ok(permit) => {
                let fut = serve(stream, addr);
                tokio::spawn(async move {
                    fut.await;
                    drop(permit);
                    crate::trim::note_freed(crate::trim::CONNECTION_BYTES);
                });
            }
            Err(_) => drop(tokio::spawn(refuse(stream))),
        }
    }
}

async fn refuse_native<P: Protocol + Send + 'static>(stream: TcpStream, why: &str) {
    let (_, wr) = stream.into_split();
    let (ftx, task) = spawn_writer::<P::Msg>(wr, link_queue());
    let _ = ftx.send(Frame::Error {
        message: why.to_string(),
    });
    drop(ftx);
    let _ = task.await;
}

/// Serve one inbound native connection: either a replica that dialled us
/// (`HelloPeer`) or a client (`HelloClient`, requests, or a client-side
/// coordinator's protocol messages).
async fn serve_native<P: Protocol + Send + 'static>(
    stream: TcpStream,
    conn: u64,
    tx: mpsc::Sender<Input<P::Msg>>,
    opts: &ServerOptions,
    limits: &ConnLimits,
) -> Result<(), ReadError> {
    let (rd, wr) = stream.into_split();
    let mut reader = FrameReader::with_buf(rd, limits.in_buf(), opts.max_frame);
    let (ftx, writer) = spawn_writer::<P::Msg>(wr, limits.out_queue());
    // Who is on the other side; set by the first Hello or Proto frame.
    let mut peer: Option<Peer> = None;
    let mut batch = Batcher::new(tx.clone());
    let result = loop {
        // Decode what is buffered; hand it over before waiting on the socket.
        let frame = match reader.try_next::<P::Msg>() {
            Ok(Some(f)) => Ok(f),
            Ok(None) => match batch.flush().await {
                Ok(()) => reader.next::<P::Msg>().await,
                Err(DriverGone) => break Ok(()),
            },
            Err(e) => Err(e),
        };
        let frame = match frame {
            Ok(f) => f,
            Err(e) => break Err(e),
        };
        let input = match frame {
            Frame::HelloPeer { node, protocol } if peer.is_none() => {
                if protocol != opts.cluster.protocol
                    || opts.cluster.replica(node).is_none()
                    || node == opts.id
                {
                    let message = format!(
                        "replica {} runs {} in a cluster of {:?}; refusing peer {node} running {protocol}",
                        opts.id,
                        opts.cluster.protocol,
                        opts.cluster.members()
                    );
                    let _ = ftx.send(Frame::Error { message });
                    break Ok(());
                }
                peer = Some(Peer::Node(node));
                // A replica link: its own bounds, no client budget, no
                // deadlines (the protocol retransmits; links are redialled).
                ftx.become_link();
                reader
                    .in_buf()
                    .become_link(Budget::unlimited(), 4 + opts.max_frame);
                Input::LinkUp {
                    peer: Peer::Node(node),
                    tx: ftx.clone(),
                }
            }
            Frame::HelloClient if peer.is_none() => {
                let _ = ftx.send(welcome(opts));
                peer = Some(Peer::Conn(conn));
                Input::LinkUp {
                    peer: Peer::Conn(conn),
                    tx: ftx.clone(),
                }
            }
            Frame::StatusRequest => crate::status::request_input(&ftx),
            Frame::Request { id, req } => Input::Client {
                req,
                reply: ReplyTo::Native {
                    tx: ftx.clone(),
                    id,
                },
            },
            Frame::Proto(msg) => {
                let from = match peer {
                    Some(p) => p,
                    None => {
                        // A coordinator that skipped the hello: register it now.
                        peer = Some(Peer::Conn(conn));
                        let up = Input::LinkUp {
                            peer: Peer::Conn(conn),
                            tx: ftx.clone(),
                        };
                        if batch.push(up).await.is_err() {
                            break Ok(());
                        }
                        Peer::Conn(conn)
                    }
                };
                Input::Msg { from, msg }
            }
            other => {
                let message = format!("unexpected frame {}", frame_name(&other));
                let _ = ftx.send(Frame::Error { message });
                break Ok(());
            }
        };
        if batch.push(input).await.is_err() {
            break Ok(());
        }
        if ftx.is_closed() {
            break Ok(()); // closed for not reading its replies
        }
    };
    if let Some(message) = result.as_ref().err().and_then(ReadError::client_message) {
        let _ = ftx.send(Frame::Error { message });
    }
    let _ = batch.flush().await;
    if let Some(p) = peer {
        let _ = tx.send(Input::LinkDown { peer: p }).await;
    }
    drop(ftx);
    finish_writer(writer, opts).await;
    result
}

/// After a connection's reader stopped: the driver may still hold clones of
/// its queue for pending replies (answered within the op timeout); let the
/// writer send them and any error, then stop it, so the socket is closed
/// even when the client never reads (a writer left running keeps it open).
pub(crate) async fn finish_writer(writer: tokio::task::JoinHandle<()>, opts: &ServerOptions) {
    let abort = writer.abort_handle();
    let grace = opts.op_timeout + Duration::from_secs(1);
    if tokio::time::timeout(grace, writer).await.is_err() {
        abort.abort();
    }
}

fn frame_name<M>(f: &Frame<M>) -> &'static str {
    match f {
        Frame::HelloPeer { .. } => "HelloPeer (not first)",
        Frame::HelloClient => "HelloClient (not first)",
        Frame::Welcome { .. } => "Welcome",
        Frame::Request { .. } => "Request",
        Frame::Response { .. } => "Response",
        Frame::Proto(_) => "Proto",
        Frame::Error { .. } => "Error",
        Frame::StatusRequest => "StatusRequest",
        Frame::Status(_) => "Status",
    }
}

fn welcome<M>(opts: &ServerOptions) -> Frame<M> {
    Frame::Welcome {
        node: opts.id,
        protocol: opts.cluster.protocol,
        members: opts.cluster.members(),
    }
}

/// Keep one link to replica `id`, redialling with backoff.
async fn dial_peer<P: Protocol + Send + 'static>(
    id: NodeId,
    addr: SocketAddr,
    tx: mpsc::Sender<Input<P::Msg>>,
    opts: Arc<ServerOptions>,
) {
    let mut backoff = Duration::from_millis(20);
    loop {
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                backoff = Duration::from_millis(20);
                let _ = stream.set_nodelay(true);
                let (rd, wr) = stream.into_split();
                let (ftx, writer) = spawn_writer::<P::Msg>(wr, link_queue());
                let _ = ftx.send(Frame::HelloPeer {
                    node: opts.id,
                    protocol: opts.cluster.protocol,
                });
                if tx
                    .send(Input::LinkUp {
                        peer: Peer::Node(id),
                        tx: ftx.clone(),
                    })
                    .await
                    .is_err()
                {
                    return;
                }
                tracing::info!(peer = id, "link up");
                let mut reader = FrameReader::new(rd, opts.max_frame);
                let why = match pump_link::<P::Msg>(&mut reader, Peer::Node(id), &tx).await {
                    LinkEnd::DriverGone => return,
                    LinkEnd::Closed(why) => why,
                };
                tracing::warn!(peer = id, "link down: {why}");
                let _ = tx
                    .send(Input::LinkDown {
                        peer: Peer::Node(id),
                    })
                    .await;
                drop(ftx);
                writer.abort();
            }
            Err(e) => tracing::debug!(peer = id, "dial {addr} failed: {e}"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}
