//! A replica process: the native port (peers and clients), links to the
//! other replicas, and one [`Driver`] running the protocol core. The RESP
//! port is `resp_server`, the metrics port `metrics_http`.
//!
//! Links: replica `i` dials every replica `j < i` and keeps that one TCP
//! connection for traffic in both directions, redialling with backoff when it
//! breaks. So every pair of replicas shares exactly one connection.

use crate::accept::{accept_limited, finish_writer};
use crate::budget::Budget;
use crate::codec::Frame;
use crate::driver::{Driver, Input, NodeInfo, ReplyTo};
use crate::link::{pump_link, Batcher, DriverGone, LinkEnd};
use crate::net::{
    link_queue, spawn_writer, ConnLimits, FrameReader, FrameTx, ReadError, MIN_READ_BUF,
};
pub use crate::options::{
    ServerOptions, DEFAULT_BUFFER_BUDGET, DEFAULT_IDLE_TIMEOUT, DEFAULT_READ_TIMEOUT,
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
use tokio::sync::mpsc;

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
    let mut native = NativeConn {
        conn,
        opts,
        ftx,
        peer: None,
    };
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
        let Some(input) = native.input(frame, &mut reader, &mut batch).await else {
            break Ok(());
        };
        if batch.push(input).await.is_err() {
            break Ok(());
        }
        if native.ftx.is_closed() {
            break Ok(()); // closed for not reading its replies
        }
    };
    let NativeConn { ftx, peer, .. } = native;
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

/// An inbound native connection while its frames are read.
struct NativeConn<'a, M> {
    conn: u64,
    opts: &'a ServerOptions,
    ftx: FrameTx<M>,
    /// Who is on the other side; set by the first Hello or Proto frame.
    peer: Option<Peer>,
}

impl<M: serde::Serialize + Send + 'static> NativeConn<'_, M> {
    /// The driver input `frame` makes; `None` ends the connection (any
    /// error for the other side is queued already).
    async fn input(
        &mut self,
        frame: Frame<M>,
        reader: &mut FrameReader,
        batch: &mut Batcher<M>,
    ) -> Option<Input<M>> {
        let input = match frame {
            Frame::HelloPeer { node, protocol } if self.peer.is_none() => {
                return self.hello_peer(node, protocol, reader);
            }
            Frame::HelloClient if self.peer.is_none() => {
                let _ = self.ftx.send(welcome(self.opts));
                self.peer = Some(Peer::Conn(self.conn));
                Input::LinkUp {
                    peer: Peer::Conn(self.conn),
                    tx: self.ftx.clone(),
                }
            }
            Frame::StatusRequest => crate::status::request_input(&self.ftx),
            Frame::Request { id, req } => Input::Client {
                req,
                reply: ReplyTo::Native {
                    tx: self.ftx.clone(),
                    id,
                },
            },
            Frame::Proto(msg) => {
                let from = match self.peer {
                    Some(p) => p,
                    None => {
                        // A coordinator that skipped the hello: register it now.
                        self.peer = Some(Peer::Conn(self.conn));
                        let up = Input::LinkUp {
                            peer: Peer::Conn(self.conn),
                            tx: self.ftx.clone(),
                        };
                        batch.push(up).await.ok()?;
                        Peer::Conn(self.conn)
                    }
                };
                Input::Msg { from, msg }
            }
            other => {
                let message = format!("unexpected frame {}", frame_name(&other));
                let _ = self.ftx.send(Frame::Error { message });
                return None;
            }
        };
        Some(input)
    }

    /// A replica dialled us: check it belongs to our cluster, then make this
    /// connection its link.
    fn hello_peer(
        &mut self,
        node: NodeId,
        protocol: ProtocolKind,
        reader: &mut FrameReader,
    ) -> Option<Input<M>> {
        let opts = self.opts;
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
            let _ = self.ftx.send(Frame::Error { message });
            return None;
        }
        self.peer = Some(Peer::Node(node));
        // A replica link: its own bounds, no client budget, no deadlines
        // (the protocol retransmits; links are redialled).
        self.ftx.become_link();
        reader
            .in_buf()
            .become_link(Budget::unlimited(), 4 + opts.max_frame);
        Some(Input::LinkUp {
            peer: Peer::Node(node),
            tx: self.ftx.clone(),
        })
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
