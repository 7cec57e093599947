//! A replica process: the native port (peers and clients), links to the
//! other replicas, and one [`Driver`] running the protocol core. The RESP
//! port is `resp_server`, the metrics port `metrics_http`.
//!
//! Links: replica `i` dials every replica `j < i` and keeps that one TCP
//! connection for traffic in both directions, redialling with backoff when it
//! breaks. So every pair of replicas shares exactly one connection.

use crate::accept::{accept_conns, finish_writer, Refusals};
use crate::auth::Role;
use crate::budget::Budget;
use crate::codec::Frame;
use crate::driver::{Driver, Input, NodeInfo, ReplyTo};
use crate::guard::{self, Refusal};
use crate::heartbeat;
use crate::link::{pump_link, Batcher, LinkEnd};
use crate::net::{
    link_queue, spawn_writer, ConnLimits, FrameReader, FrameTx, ReadError, MIN_READ_BUF,
};
pub use crate::options::{
    ServerOptions, DEFAULT_BUFFER_BUDGET, DEFAULT_IDLE_TIMEOUT, DEFAULT_READ_TIMEOUT,
};
use crate::peer_auth::{self, ClusterSecret, Side};
use crate::peer_dial::PeerDialer;
use crate::shutdown::{ConnStop, Shutdown};
use crate::stream::Conn;
use crate::tls::{TlsIdentity, TlsServer};
use crate::version::{self, Version};
use anyhow::Context;
use quorumkv_core::protocol::{
    NodeSpec, Protocol, ProtocolDef, ProtocolKind, ProtocolOptions, Timing, Visitor,
};
use quorumkv_core::znode::{ZkError, ZnodeOp, ZnodeReply};
use quorumkv_core::{NodeId, OpError, OpId, Peer, Request, Response};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Bound listeners, so "address in use" is reported before anything starts.
pub struct Listeners {
    pub native: TcpListener,
    pub resp: Option<TcpListener>,
    /// The ZooKeeper client port (`zkwire`).
    pub zk: Option<TcpListener>,
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
        let zk = match me.zk {
            Some(a) => Some(
                TcpListener::bind(a)
                    .await
                    .with_context(|| format!("cannot listen on {a} (ZooKeeper port)"))?,
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
            zk,
            metrics,
        })
    }
}

/// Run a replica until `shutdown` resolves, with the protocol its cluster
/// file names (looked up in the core's registry); then drain it (see
/// [`run_draining`]).
pub async fn run(
    opts: ServerOptions,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    run_draining(opts, listeners, shutdown, std::future::pending()).await
}

/// [`run`], with a second future that cuts the drain short: once
/// `shutdown` resolves the replica stops accepting clients, `/readyz`
/// answers 503, the operations in flight are answered, then the links
/// close and storage is flushed, within [`ServerOptions::drain_timeout`];
/// when `cut` resolves (a second signal) the waits end at once and the
/// storage gets a short last chance.
pub async fn run_draining(
    opts: ServerOptions,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
    cut: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let protocol = opts.cluster.protocol;
    protocol
        .visit(RunServer {
            opts,
            listeners,
            shutdown: Box::pin(shutdown),
            cut: Box::pin(cut),
        })
        .await
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// `run` once the protocol's types are known.
struct RunServer {
    opts: ServerOptions,
    listeners: Listeners,
    shutdown: BoxFuture<()>,
    cut: BoxFuture<()>,
}

impl Visitor for RunServer {
    type Output = BoxFuture<anyhow::Result<()>>;
    fn visit<D: ProtocolDef>(self) -> Self::Output {
        let stop = Stop {
            start: self.shutdown,
            cut: self.cut,
        };
        Box::pin(run_protocol::<D>(self.opts, self.listeners, stop))
    }
}

/// When to start draining, and when to cut the drain short.
struct Stop {
    start: BoxFuture<()>,
    cut: BoxFuture<()>,
}

/// Run a replica of protocol `D` (tests use it with protocols of their own).
pub async fn run_with<D: ProtocolDef>(
    opts: ServerOptions,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let stop = Stop {
        start: Box::pin(shutdown),
        cut: Box::pin(std::future::pending()),
    };
    run_protocol::<D>(opts, listeners, stop).await
}

async fn run_protocol<D: ProtocolDef>(
    opts: ServerOptions,
    listeners: Listeners,
    stop: Stop,
) -> anyhow::Result<()> {
    crate::options::check_durability(D::NAME, D::PERSISTS_STATE, opts.durability)?;
    let popts = D::Options::from_pairs(&opts.option_pairs())
        .map_err(|e| anyhow::anyhow!("protocol {}: {e}", D::NAME))?;
    let members = opts.cluster.members();
    popts
        .check_size(members.len())
        .map_err(|e| anyhow::anyhow!("protocol {}: {e}", D::NAME))?;
    let spec = NodeSpec {
        id: opts.id,
        members: &members,
        // No boot counter survives a restart yet: a random boot id keeps
        // this life's writer id apart from earlier ones.
        incarnation: u64::from(rand::random::<u32>()),
        durable: opts.durability.keeps_data(),
        lost_state: opts.recover,
        timing: Timing {
            op_timeout: opts.op_timeout,
            ..Timing::default()
        },
        seed: rand::random(),
    };
    if opts.durability.keeps_data() && opts.data_dir.is_none() {
        anyhow::bail!("durability {} needs a data directory", opts.durability);
    }
    let started = std::time::Instant::now();
    let storage = crate::storage::open(opts.durability, opts.data().as_ref())?;
    let core = D::node(&spec, &popts, None);
    let storage = (storage, started);
    // Which protocol messages a connection that is not a replica may send
    // (a client-side coordinator's); everything else is peer-only.
    let may_send = quorumkv_core::protocol::registry::client_may_send_fn::<D>();
    run_core(core, storage, opts, listeners, may_send, stop).await
}

async fn run_core<P: Protocol + Send + 'static>(
    core: P,
    storage: (Box<dyn crate::storage::Storage>, std::time::Instant),
    opts: ServerOptions,
    mut listeners: Listeners,
    may_send: fn(&P::Msg) -> bool,
    stop_when: Stop,
) -> anyhow::Result<()> {
    let native_limits = opts.conn_limits(4 + opts.max_frame);
    // RESP: a command with a value of the largest frame, plus its framing.
    let resp_limits = opts.conn_limits(opts.max_frame + MIN_READ_BUF);
    // ZooKeeper: a packet of `jute.maxbuffer`, its length and read slack.
    let zk_limits = opts.conn_limits(opts.zk_max_buffer + 4 + MIN_READ_BUF);
    let driver = load_driver(
        core,
        storage,
        &opts,
        &listeners,
        &native_limits,
        (&resp_limits, &zk_limits),
    )?;
    let tls = match &opts.tls {
        Some(settings) => Some(TlsServer::load(settings.clone()).context("TLS")?),
        None => None,
    };
    let (tx, rx) = mpsc::channel::<Input<P::Msg>>(8192);
    let (fatal_tx, fatal_rx) = tokio::sync::oneshot::channel();
    let driver_task = tokio::spawn(driver.on_fatal(fatal_tx).run(rx));
    let opts = Arc::new(opts);
    let (stopper, stop) = Shutdown::new();
    let metrics = (listeners.metrics).take().map(|l| {
        tokio::spawn(crate::metrics_http::accept_metrics::<P>(
            l,
            tx.clone(),
            stopper.draining(),
        ))
    });
    let accepts = spawn_accepts::<P>(
        listeners,
        &tx,
        &opts,
        (native_limits, resp_limits, zk_limits, tls.clone()),
        may_send,
        &stop,
    )?;
    let dials = (opts.cluster.replicas.iter().filter(|r| r.id < opts.id))
        .map(|r| {
            let link = dial_peer::<P>(r.id, tx.clone(), opts.clone(), tls.clone());
            tokio::spawn(link)
        })
        .collect();
    drop((tx, stop));
    tracing::info!(id = opts.id, protocol = %opts.cluster.protocol, "replica started");
    // The core may give up (`Protocol::fatal`): stop, and exit with its reason.
    let fatal = tokio::select! {
        () = stop_when.start => None,
        Ok(why) = fatal_rx => Some(why),
    };
    let tasks = Tasks {
        accepts,
        metrics,
        dials,
    };
    let bound = opts.drain_timeout;
    stop_gracefully(stopper, tasks, driver_task, bound, stop_when.cut).await;
    match fatal {
        Some(why) => Err(anyhow::anyhow!("replica {} stopped: {why}", opts.id)),
        None => Ok(()),
    }
}

/// The driver over `core`, with its stored state restored.
fn load_driver<P: Protocol + Send + 'static>(
    core: P,
    (storage, started): (Box<dyn crate::storage::Storage>, std::time::Instant),
    opts: &ServerOptions,
    listeners: &Listeners,
    native_limits: &ConnLimits,
    (resp_limits, zk_limits): (&ConnLimits, &ConnLimits),
) -> anyhow::Result<Driver<P>> {
    let mut budgets = vec![("native", native_limits.budget.clone())];
    if listeners.resp.is_some() {
        budgets.push(("resp", resp_limits.budget.clone()));
    }
    if listeners.zk.is_some() {
        budgets.push(("zk", zk_limits.budget.clone()));
    }
    let info = NodeInfo {
        id: opts.id,
        protocol: opts.cluster.protocol.to_string(),
        members: opts.cluster.members(),
        budgets,
    };
    let driver = Driver::new(core, info, storage).context("cannot load storage")?;
    if opts.durability.keeps_data() {
        tracing::info!(
            "restored from {} in {:.3}s",
            opts.data_dir
                .as_deref()
                .unwrap_or(std::path::Path::new("?"))
                .display(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(driver)
}

/// The listeners' accept loops, the TLS reloader and the trimmer.
fn spawn_accepts<P: Protocol + Send + 'static>(
    listeners: Listeners,
    tx: &mpsc::Sender<Input<P::Msg>>,
    opts: &Arc<ServerOptions>,
    (native_limits, resp_limits, zk_limits, tls): (
        ConnLimits,
        ConnLimits,
        ConnLimits,
        Option<Arc<TlsServer>>,
    ),
    may_send: fn(&P::Msg) -> bool,
    stop: &ConnStop,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let mut accepts = vec![tokio::spawn(accept_native::<P>(
        listeners.native,
        tx.clone(),
        opts.clone(),
        Arc::new(AtomicU64::new(1)),
        (native_limits, tls.clone()),
        may_send,
        stop.clone(),
    ))];
    if let Some(tls) = &tls {
        accepts.push(tls.reload_on_sighup()?);
        tracing::info!(cert = %tls.settings().cert.display(), "TLS 1.3 on the native and RESP ports");
    }
    if let Some(l) = listeners.resp {
        accepts.push(tokio::spawn(crate::resp_server::accept_resp::<P>(
            l,
            tx.clone(),
            opts.clone(),
            resp_limits,
            stop.clone(),
            tls.clone(),
        )));
    }
    if let Some(l) = listeners.zk {
        accepts.push(tokio::spawn(crate::zkwire::accept_zk::<P>(
            l,
            tx.clone(),
            opts.clone(),
            zk_limits,
            stop.clone(),
            tls,
        )));
    }
    accepts.push(tokio::spawn(crate::trim::trim_periodically()));
    Ok(accepts)
}

/// What runs beside the driver and stops with the drain.
struct Tasks {
    /// The client ports' accept loops (and the TLS reloader, the trimmer).
    accepts: Vec<JoinHandle<()>>,
    /// The metrics port: answers `/readyz` (503, draining) until the links close.
    metrics: Option<JoinHandle<()>>,
    /// The links this replica dials.
    dials: Vec<JoinHandle<()>>,
}

/// After a second signal: how long the driver still gets to flush storage.
const CUT_GRACE: Duration = Duration::from_secs(1);

/// The drain: stop accepting (and be unready); let client connections hand
/// over what they read, get their replies and close, within three quarters
/// of `bound`; then close the links and let the driver finish (what waits
/// for storage is made durable; its links' writers flush and close when it
/// drops them) within the rest. `cut` ends each wait at once. Each phase
/// is logged.
async fn stop_gracefully(
    mut stopper: Shutdown,
    tasks: Tasks,
    mut driver: JoinHandle<()>,
    bound: Duration,
    cut: impl Future<Output = ()>,
) {
    let start = Instant::now();
    let mut cut = std::pin::pin!(cut);
    tasks.accepts.iter().for_each(JoinHandle::abort);
    tracing::info!(
        timeout = ?bound,
        "draining (1/4): stopped accepting client connections; /readyz answers 503; \
         answering what the connections sent already"
    );
    let cut_short = tokio::select! {
        done = stopper.drain_clients(start + bound * 3 / 4) => {
            match done {
                true => tracing::info!(after = ?start.elapsed(), "draining (2/4): every client connection answered and closed"),
                false => tracing::warn!(after = ?start.elapsed(), "draining (2/4): client connections still open after three quarters of the drain timeout; closing them"),
            }
            false
        }
        () = &mut cut => {
            tracing::warn!("draining (2/4): second signal: cutting the drain short; closing client connections");
            true
        }
    };
    stopper.close_links();
    tasks.dials.iter().for_each(JoinHandle::abort);
    if let Some(m) = &tasks.metrics {
        // It holds an input sender: the driver ends once it is gone.
        m.abort();
    }
    tracing::info!("draining (3/4): closing the links to other replicas; flushing storage");
    let by = match cut_short {
        true => Instant::now() + CUT_GRACE,
        false => start + bound,
    };
    let finished = tokio::select! {
        r = tokio::time::timeout_at(by, &mut driver) => r.is_ok(),
        () = &mut cut, if !cut_short => {
            tracing::warn!("second signal: cutting the drain short");
            tokio::time::timeout(CUT_GRACE, &mut driver).await.is_ok()
        }
    };
    if finished {
        tracing::info!(after = ?start.elapsed(), "draining (4/4): storage flushed and links closed; stopping");
    } else {
        tracing::warn!(after = ?start.elapsed(), "draining (4/4): the driver did not finish in time (storage not flushed); stopping it");
        driver.abort();
    }
}

async fn accept_native<P: Protocol + Send + 'static>(
    listener: TcpListener,
    tx: mpsc::Sender<Input<P::Msg>>,
    opts: Arc<ServerOptions>,
    conn_ids: Arc<AtomicU64>,
    (limits, tls): (ConnLimits, Option<Arc<TlsServer>>),
    may_send: fn(&P::Msg) -> bool,
    stop: ConnStop,
) {
    let max = opts.max_connections;
    let serve = move |stream: Conn, addr: SocketAddr, identity: Option<TlsIdentity>| {
        let conn = conn_ids.fetch_add(1, Ordering::Relaxed);
        let (tx, opts, limits) = (tx.clone(), opts.clone(), limits.clone());
        let stop = stop.clone();
        let who = Who {
            conn,
            addr,
            may_send,
            tls: identity,
        };
        async move {
            if let Err(e) = serve_native::<P>(stream, who, tx, &opts, &limits, stop).await {
                tracing::debug!(%addr, "native connection ended: {e}");
            }
        }
    };
    let say = Refusals {
        too_many: error_frame("too many connections"),
        plain_on_tls: error_frame(crate::tls::PLAIN_ON_TLS_PORT),
    };
    accept_conns(listener, max, tls, say, serve).await;
}

/// An `Error` frame's bytes (the same whatever the protocol's messages).
fn error_frame(message: &str) -> Vec<u8> {
    let message = message.to_string();
    crate::codec::encode_to_bytes::<()>(&Frame::Error { message }).to_vec()
}

/// An inbound native connection: its id, where it comes from, which
/// protocol messages it may send unless it proves to be a replica, and what
/// its TLS certificate proved (`tls`: `None` on plain TCP).
#[derive(Clone)]
struct Who<M> {
    conn: u64,
    addr: SocketAddr,
    may_send: fn(&M) -> bool,
    tls: Option<TlsIdentity>,
}

/// Serve one inbound native connection: either a replica that dialled us
/// (`HelloPeer`) or a client (`HelloClient`, requests, or a client-side
/// coordinator's protocol messages). Replica links, and coordinators that
/// send heartbeats, get heartbeats.
async fn serve_native<P: Protocol + Send + 'static>(
    stream: Conn,
    who: Who<P::Msg>,
    tx: mpsc::Sender<Input<P::Msg>>,
    opts: &ServerOptions,
    limits: &ConnLimits,
    mut stop: ConnStop,
) -> Result<(), ReadError> {
    let (rd, wr) = stream.split();
    let mut reader = FrameReader::with_buf(rd, limits.in_buf(), opts.max_frame);
    let (ftx, writer) = spawn_writer::<P::Msg>(wr, limits.out_queue());
    ftx.set_delay(opts.client_delay(who.conn));
    let mut native = NativeConn {
        who,
        opts,
        ftx,
        peer: None,
        tx: tx.clone(),
        login: None,
        peer_proved: false,
        book_heard: false,
    };
    let mut batch = Batcher::new(tx.clone());
    let mut beating = false;
    let result = loop {
        let frame = match next_frame(&mut reader, &mut batch, &mut stop).await {
            Ok(Some(f)) => f,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        if let Frame::Heartbeat = frame {
            // A client-side coordinator asks for heartbeats by sending one.
            if !std::mem::replace(&mut beating, true) {
                heartbeat::start(&native.ftx, &mut reader, opts.heartbeat);
            }
            continue;
        }
        let Some(input) = native.input(frame, &mut reader, &mut batch).await else {
            break Ok(());
        };
        if matches!(native.peer, Some(Peer::Node(_))) && !std::mem::replace(&mut beating, true) {
            // A replica link (its hello accepted): heartbeats, and it
            // stays open until the links close at shutdown.
            heartbeat::start(&native.ftx, &mut reader, opts.heartbeat);
            stop.become_link();
        }
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
        let down = Input::LinkDown {
            peer: p,
            tx: Some(ftx.clone()),
        };
        let _ = tx.send(down).await;
    }
    // Hold no input sender while the replies go out: at shutdown the
    // driver stops once they are all gone.
    drop((ftx, batch, tx));
    finish_writer(writer, opts).await;
    result
}

/// The next frame of a native connection: decode what is buffered, or hand
/// the batch over and read more. `None`: the driver is gone or the replica
/// is shutting down.
async fn next_frame<M: serde::de::DeserializeOwned>(
    reader: &mut FrameReader,
    batch: &mut Batcher<M>,
    stop: &mut ConnStop,
) -> Result<Option<Frame<M>>, ReadError> {
    if let Some(f) = reader.try_next::<M>()? {
        return Ok(Some(f));
    }
    if batch.flush().await.is_err() {
        return Ok(None);
    }
    tokio::select! {
        biased;
        () = stop.stopped() => Ok(None),
        f = reader.next::<M>() => f.map(Some),
    }
}

/// An inbound native connection while its frames are read.
struct NativeConn<'a, M> {
    who: Who<M>,
    opts: &'a ServerOptions,
    ftx: FrameTx<M>,
    /// Who is on the other side; set by the first Hello or Proto frame.
    peer: Option<Peer>,
    /// The driver, for a replica's hello (answered before more is read).
    tx: mpsc::Sender<Input<M>>,
    /// Who logged in (`Frame::Auth`), where the replica has users.
    login: Option<Login>,
    /// A replica link whose peer proved who it is (the cluster secret or
    /// its certificate): its word about its own address is taken.
    peer_proved: bool,
    /// The peer's address book was heard: one per link, later ones ignored.
    book_heard: bool,
}

/// A client connection's user, its role, and the users file's generation
/// the role was read from (a reload may change or remove it).
struct Login {
    name: String,
    role: Role,
    generation: u64,
}

/// What a replica with users answers a client that has not logged in.
const NOAUTH: &str = "NOAUTH authentication required: this replica has users; log in with \
     --user NAME (the password from --password-file, $QUORUMKV_PASSWORD or a prompt)";

/// How long a replica of another wire version waits for its refusal.
const VERSION_REFUSAL_PAUSE: Duration = Duration::from_secs(1);

/// How long a dialler has to answer our challenge.
const PROOF_TIMEOUT: Duration = Duration::from_secs(5);

impl<M: serde::Serialize + serde::de::DeserializeOwned + Send + 'static> NativeConn<'_, M> {
    /// The driver input `frame` makes; `None` ends the connection (any
    /// error for the other side is queued already).
    async fn input(
        &mut self,
        frame: Frame<M>,
        reader: &mut FrameReader,
        batch: &mut Batcher<M>,
    ) -> Option<Input<M>> {
        let conn = self.who.conn;
        let frame = match self.authorize(frame).await? {
            Ok(frame) => frame,
            Err(answered) => return Some(answered),
        };
        let input = match frame {
            Frame::HelloPeer {
                node,
                protocol,
                nonce,
                version,
            } if self.peer.is_none() => {
                self.check_peer_version(node, version.as_ref()).await?;
                self.hello_peer(node, protocol, &nonce, reader, batch)
                    .await?;
                if version.as_ref().is_some_and(|v| v.knows(5)) {
                    let addrs = self.opts.book.all();
                    let _ = self.ftx.send(Frame::PeerBook { addrs });
                }
                // Registered with the driver already: nothing to hand over.
                Input::Batch(Vec::new())
            }
            Frame::PeerBook { addrs } if matches!(self.peer, Some(Peer::Node(_))) => {
                self.hear_book(addrs);
                Input::Batch(Vec::new())
            }
            Frame::HelloClient { version } if self.peer.is_none() => {
                if let Err(why) = version::check(version::Other::Client, version.as_ref()) {
                    return self.refuse(Refusal::Version, why);
                }
                self.hello_client(batch).await?
            }
            Frame::StatusRequest => crate::status::request_input(&self.ftx),
            Frame::SnapshotRequest if matches!(self.peer, Some(Peer::Conn(_))) => {
                crate::snapshot::request_input(&self.ftx)
            }
            Frame::MemberRequest { voters } if matches!(self.peer, Some(Peer::Conn(_))) => {
                crate::member::request_input(&self.ftx, voters)
            }
            Frame::AddressUpdate { id, addr } if matches!(self.peer, Some(Peer::Conn(_))) => {
                let book = &self.opts.book;
                crate::address_book::request_input(&self.ftx, book, self.opts.id, id, addr)
            }
            Frame::Request {
                id,
                req: Request::Znode(ZnodeOp::AddAuth { scheme, .. }),
                ..
            } if scheme == "user" || self.peer.is_none() => self.refuse_add_auth(id),
            Frame::Request { id, op, req } => Input::Client {
                req,
                session: conn,
                op,
                reply: ReplyTo::Native {
                    tx: self.ftx.clone(),
                    id,
                },
            },
            Frame::Proto(msg) => return self.proto(msg, batch).await,
            other => {
                let why = format!("unexpected frame {}", frame_name(&other));
                let what = match other {
                    Frame::HelloPeer { .. } | Frame::PeerProof { .. } => Refusal::Handshake,
                    _ => Refusal::Frame,
                };
                return self.refuse(what, why);
            }
        };
        Some(input)
    }

    /// A client's hello: welcome it and register its session.
    async fn hello_client(&mut self, batch: &mut Batcher<M>) -> Option<Input<M>> {
        let conn = self.who.conn;
        let role = self.role();
        let _ = self.ftx.send(welcome(self.opts, role));
        self.peer = Some(Peer::Conn(conn));
        if let Some(identity) = self.login_identity() {
            batch.push(identity).await.ok()?;
        }
        Some(Input::LinkUp {
            peer: Peer::Conn(conn),
            tx: Some(self.ftx.clone()),
        })
    }

    /// ZooKeeper's addAuth is for a connection that said hello (its
    /// identities go when the link does); scheme `user` is the server's
    /// own (a login), never taken from a client.
    fn refuse_add_auth(&mut self, id: u64) -> Input<M> {
        let why = match self.peer {
            None => "addAuth needs a client hello first".to_string(),
            Some(_) => "scheme user is the server's: log in with --user instead".into(),
        };
        let resp = Response::Znode(ZnodeReply::Error(ZkError::BadArguments(why)));
        let _ = self.ftx.send(Frame::Response { id, resp });
        Input::Batch(Vec::new())
    }

    /// A protocol message: from a replica's link, or from a coordinator
    /// where the role allows the message.
    async fn proto(&mut self, msg: M, batch: &mut Batcher<M>) -> Option<Input<M>> {
        let conn = self.who.conn;
        let from = match self.peer {
            Some(p @ Peer::Node(_)) => p,
            _ if !(self.who.may_send)(&msg) => {
                return self.refuse(
                    Refusal::Frame,
                    "this protocol message may only come from a replica".into(),
                );
            }
            Some(p) => p,
            None => {
                // A coordinator that skipped the hello: register it now.
                self.peer = Some(Peer::Conn(conn));
                let up = Input::LinkUp {
                    peer: Peer::Conn(conn),
                    tx: Some(self.ftx.clone()),
                };
                batch.push(up).await.ok()?;
                Peer::Conn(conn)
            }
        };
        Some(Input::Msg { from, msg })
    }

    /// Users and roles, where the replica has a users file: `Auth` logs in;
    /// before that only a replica's hello and status requests pass; after
    /// it, each request is checked against the user's role. `Ok(frame)`:
    /// go on with it; `Err(input)`: answered here; `None`: close.
    async fn authorize(&mut self, frame: Frame<M>) -> Option<Result<Frame<M>, Input<M>>> {
        let done = || Some(Err(Input::Batch(Vec::new())));
        let Some(users) = &self.opts.users else {
            if let Frame::Auth { .. } = frame {
                let why = "this replica has no users file: connect without --user".to_string();
                return self.refuse(Refusal::Handshake, why);
            }
            return Some(Ok(frame));
        };
        if matches!(self.peer, Some(Peer::Node(_))) {
            return Some(Ok(frame));
        }
        let role = match frame {
            Frame::Auth { user, password } => {
                match crate::auth::authenticate(users, &user, &password).await {
                    Ok(role) => {
                        let generation = users.generation();
                        let name = user;
                        self.login = Some(Login {
                            name,
                            role,
                            generation,
                        });
                        // Logged in after the hello: the identity now.
                        return match (self.peer, self.login_identity()) {
                            (Some(Peer::Conn(_)), Some(identity)) => Some(Err(identity)),
                            _ => done(),
                        };
                    }
                    Err(e) => {
                        crate::auth::log_failure(self.who.addr, "native", &user, &e);
                        let why = "WRONGPASS invalid username-password pair or user is disabled";
                        let _ = self.ftx.send(Frame::Error {
                            message: why.to_string(),
                        });
                        return None;
                    }
                }
            }
            Frame::HelloPeer { .. } | Frame::StatusRequest | Frame::Heartbeat => {
                return Some(Ok(frame))
            }
            _ => match self.role() {
                Some(role) => role,
                None => return self.refuse(Refusal::Frame, NOAUTH.to_string()),
            },
        };
        self.permit(frame, role)
    }

    /// What a logged-in connection of `role` may send: `frame` back, or
    /// the refusal (answered here).
    fn permit(&self, frame: Frame<M>, role: Role) -> Option<Result<Frame<M>, Input<M>>> {
        let done = || Some(Err(Input::Batch(Vec::new())));
        let name = self.login.as_ref().map_or("", |l| l.name.as_str());
        match &frame {
            Frame::Request { id, req, .. } if !role.may(req) => {
                let what = match crate::auth::access_of(req) {
                    crate::auth::Access::Admin => "run an admin request",
                    _ => "write",
                };
                let why = format!("NOPERM user {name} (role {}) may not {what}", role.name());
                let resp = Response::Failed(OpError::refused(why));
                let _ = self.ftx.send(Frame::Response { id: *id, resp });
                done()
            }
            Frame::SnapshotRequest if !role.may_admin() => {
                let why = format!(
                    "NOPERM user {name} (role {}) may not take a snapshot (admin only)",
                    role.name()
                );
                self.refuse(Refusal::Frame, why)
            }
            Frame::AddressUpdate { .. } if !role.may_admin() => {
                let why = format!(
                    "NOPERM user {name} (role {}) may not move a replica (admin only)",
                    role.name()
                );
                let _ = self.ftx.send(Frame::AddressUpdated { answer: Err(why) });
                done()
            }
            Frame::MemberRequest { voters: Some(_) } if !role.may_admin() => {
                let why = format!(
                    "NOPERM user {name} (role {}) may not change the membership (admin only)",
                    role.name()
                );
                let answer = Err(why);
                let _ = self.ftx.send(Frame::Members { answer });
                done()
            }
            Frame::Proto(_) if !role.may_write() => {
                let why = format!(
                    "NOPERM user {name} (role {}) may not run a client-side coordinator \
                     (it writes); use proxy mode",
                    role.name()
                );
                self.refuse(Refusal::Frame, why)
            }
            _ => Some(Ok(frame)),
        }
    }

    /// The znode identity of a logged-in client connection, `user:NAME`
    /// (a quorumkv scheme: the users file holds argon2 hashes, not
    /// ZooKeeper's sha1 digests, so a login cannot stand for a `digest`
    /// id). Handed to the Zab core as an `AddAuth` of scheme `user` for
    /// this connection, which it keeps with the connection's other
    /// identities and puts in each of its entries (`znode_sm.rs`). Sent once
    /// the connection said hello (its link's end clears it), and again on
    /// a later login (it replaces the earlier user).
    fn login_identity(&self) -> Option<Input<M>> {
        // Protocols without the znode service refuse it at once (and the
        // reply goes nowhere): nothing here names a protocol.
        let login = self.login.as_ref()?;
        let (reply, _) = tokio::sync::oneshot::channel();
        Some(Input::Client {
            req: Request::Znode(ZnodeOp::AddAuth {
                scheme: "user".into(),
                auth: login.name.clone(),
            }),
            session: self.who.conn,
            op: OpId::NONE,
            reply: ReplyTo::Local(reply),
        })
    }

    /// The logged-in user's role as the users file now says (`None`: not
    /// logged in, or the user was removed by a reload).
    fn role(&mut self) -> Option<Role> {
        let users = self.opts.users.as_ref()?;
        let login = self.login.as_mut()?;
        let now = users.generation();
        if login.generation != now {
            login.role = users.current().role(&login.name)?;
            login.generation = now;
        }
        Some(login.role)
    }

    /// Count and log a refusal, and tell the other side why before closing.
    fn refuse<T>(&self, what: Refusal, why: String) -> Option<T> {
        guard::refused(what, Some(self.who.addr), &why);
        let _ = self.ftx.send(Frame::Error { message: why });
        None
    }

    /// A replica dialled us: refuse it if its wire version does not
    /// interoperate with ours, after a pause: releases before this one
    /// redial at once after a refused hello, and would otherwise redial in
    /// a tight loop.
    async fn check_peer_version(&self, node: NodeId, sent: Option<&Version>) -> Option<()> {
        match version::check(version::Other::Replica(node), sent) {
            Ok(()) => Some(()),
            Err(why) => {
                tokio::time::sleep(VERSION_REFUSAL_PAUSE).await;
                self.refuse(Refusal::Version, why)
            }
        }
    }

    /// A replica dialled us: check it belongs to our cluster, that it holds
    /// the cluster secret if we have one, and that the driver takes it (a
    /// live link to the same replica is replaced only by an authenticated
    /// hello); then this connection is its link. `None`: refused.
    async fn hello_peer(
        &mut self,
        node: NodeId,
        protocol: ProtocolKind,
        nonce: &[u8],
        reader: &mut FrameReader,
        batch: &mut Batcher<M>,
    ) -> Option<()> {
        let opts = self.opts;
        let me = opts.id;
        if protocol != opts.cluster.protocol || opts.cluster.replica(node).is_none() || node == me {
            let why = format!(
                "replica {me} runs {} in a cluster of {:?}; refusing peer {node} running {protocol}",
                opts.cluster.protocol,
                opts.cluster.members()
            );
            return self.refuse(Refusal::Handshake, why);
        }
        if node < me {
            // Replica i dials only replicas below i (`dial_peer`): a hello
            // from below is never one of ours.
            let why = format!("replica {node} never dials replica {me} (it is dialled by it)");
            return self.refuse(Refusal::Handshake, why);
        }
        if let Some(why) = self
            .who
            .tls
            .as_ref()
            .and_then(|t| certificate_refuses(t, node))
        {
            return self.refuse(Refusal::Handshake, why);
        }
        let authenticated = match &opts.secret {
            Some(secret) => {
                self.prove_and_check(secret, node, nonce, reader).await?;
                true
            }
            // Over TLS its certificate proved it is replica `node`.
            None => self.who.tls.is_some(),
        };
        if batch.flush().await.is_err() {
            return None;
        }
        let (answer, answered) = oneshot::channel();
        let hello = Input::PeerHello {
            node,
            tx: self.ftx.clone(),
            authenticated,
            answer,
        };
        self.tx.send(hello).await.ok()?;
        if let Err(why) = answered.await.ok()? {
            return self.refuse(Refusal::Handshake, why);
        }
        self.peer = Some(Peer::Node(node));
        self.peer_proved = authenticated;
        // A replica link: its own bounds, no client budget, no deadlines
        // (the protocol retransmits; links are redialled).
        self.ftx.become_link();
        self.ftx.set_delay(opts.peer_delay(node));
        reader
            .in_buf()
            .become_link(Budget::unlimited(), 4 + opts.max_frame);
        reader.allow_parts(crate::codec::MAX_TRANSFER);
        Some(())
    }

    /// The book of the replica that dialled us (`address_book`): where it
    /// says it lives moves it here, when it proved who it is (the file is
    /// rewritten off the runtime's workers); the rest are hints.
    fn hear_book(&mut self, addrs: Vec<(NodeId, String)>) {
        let Some(Peer::Node(from)) = self.peer.filter(|_| !self.book_heard) else {
            return;
        };
        self.book_heard = true;
        let book = self.opts.book.clone();
        let Some(addr) = book.hear((self.opts.id, from), &addrs, self.peer_proved) else {
            return;
        };
        tokio::task::spawn_blocking(move || match book.set(from, &addr) {
            Ok(done) => tracing::warn!(peer = from, "it says it moved: {done}"),
            Err(why) => tracing::warn!(peer = from, "it says it is at {addr}, not taken: {why}"),
        });
    }

    /// The acceptor's half of `peer_auth`'s exchange with replica `node`.
    async fn prove_and_check(
        &mut self,
        secret: &ClusterSecret,
        node: NodeId,
        their_nonce: &[u8],
        reader: &mut FrameReader,
    ) -> Option<()> {
        let (me, cluster) = (self.opts.id, self.opts.cluster.id());
        let my_nonce = peer_auth::nonce();
        let proof = secret.proof(
            Side::Acceptor,
            &cluster,
            (me, node),
            (their_nonce, &my_nonce),
        );
        let challenge = Frame::PeerChallenge {
            nonce: my_nonce.clone().into(),
            proof: proof.into(),
        };
        if self.ftx.send(challenge).is_err() {
            return None;
        }
        // The dialler beats from its hello on: beats may come before the proof.
        let proof = async {
            loop {
                match reader.next::<M>().await {
                    Ok(Frame::Heartbeat) => continue,
                    other => return other,
                }
            }
        };
        let answer = tokio::time::timeout(PROOF_TIMEOUT, proof).await;
        let why = match answer {
            Ok(Ok(Frame::PeerProof { proof }))
                if secret.verify(
                    Side::Dialler,
                    &cluster,
                    (node, me),
                    (&my_nonce, their_nonce),
                    &proof,
                ) =>
            {
                return Some(());
            }
            Ok(Ok(Frame::PeerProof { .. })) => {
                format!("replica {node}: wrong proof of the cluster secret")
            }
            Ok(Ok(other)) => format!(
                "replica {node}: expected a proof of the cluster secret, got {}",
                frame_name(&other)
            ),
            Ok(Err(e)) => format!("replica {node}: no proof of the cluster secret: {e}"),
            Err(_) => {
                format!("replica {node}: no proof of the cluster secret in {PROOF_TIMEOUT:?}")
            }
        };
        self.refuse(Refusal::Handshake, why)
    }
}

/// Over TLS, a connection may be replica `node`'s link only if its
/// certificate names that replica; why not, if it does not.
fn certificate_refuses(tls: &TlsIdentity, node: NodeId) -> Option<String> {
    match tls.replica {
        Some(r) if r == node => None,
        Some(r) => Some(format!("certificate names replica {r}, not {node}")),
        None => Some(format!(
            "no replica certificate presented; refusing peer {node}"
        )),
    }
}

fn frame_name<M>(f: &Frame<M>) -> &'static str {
    match f {
        Frame::HelloPeer { .. } => "HelloPeer (not first)",
        Frame::HelloClient { .. } => "HelloClient (not first)",
        Frame::Welcome { .. } => "Welcome",
        Frame::Request { .. } => "Request",
        Frame::Response { .. } => "Response",
        Frame::Proto(_) => "Proto",
        Frame::Error { .. } => "Error",
        Frame::StatusRequest => "StatusRequest",
        Frame::Status(_) => "Status",
        Frame::Heartbeat => "Heartbeat",
        Frame::Notify(_) => "Notify",
        Frame::PeerChallenge { .. } => "PeerChallenge",
        Frame::PeerProof { .. } => "PeerProof",
        Frame::Auth { .. } => "Auth",
        Frame::SnapshotRequest => "SnapshotRequest",
        Frame::SnapshotPart { .. } => "SnapshotPart",
        Frame::MemberRequest { .. } => "MemberRequest",
        Frame::Members { .. } => "Members",
        Frame::AddressUpdate { .. } => "AddressUpdate",
        Frame::AddressUpdated { .. } => "AddressUpdated",
        Frame::Part { .. } => "Part",
        Frame::PeerBook { .. } => "PeerBook",
    }
}

/// The answer to a client's hello: who we are, the protocol and its
/// options as configured (the client parses them as we did), and where
/// every replica listens (to follow `NotLeader` hints).
fn welcome<M>(opts: &ServerOptions, role: Option<Role>) -> Frame<M> {
    Frame::Welcome {
        role: role.map(|r| r.name().to_string()),
        node: opts.id,
        protocol: opts.cluster.protocol,
        members: opts.cluster.members(),
        options: opts.option_pairs(),
        addrs: opts.book.all(),
        version: Some(Version::ours()),
    }
}

/// Keep one link to replica `id` (dialled at its advertised `HOST:PORT`
/// in the address book, which `quorumkv member update` may change),
/// redialling with backoff; the name is resolved afresh at every dial
/// ([`PeerDialer`]).
async fn dial_peer<P: Protocol + Send + 'static>(
    id: NodeId,
    tx: mpsc::Sender<Input<P::Msg>>,
    opts: Arc<ServerOptions>,
    tls: Option<Arc<TlsServer>>,
) {
    let name = || opts.book.dial(id).unwrap_or_default();
    let mut dialer = PeerDialer::new(name(), crate::peer_dial::resolve_now);
    let mut backoff = Duration::from_millis(20);
    // A TLS failure or a refused hello (another wire version, no secret)
    // is a misconfiguration, not a peer still starting: said once at warn
    // level (again when it changes), then at debug; a refusal does not
    // reset the backoff.
    let mut last_said = String::new();
    loop {
        dialer.rename(name());
        let mut end = match dialer.connect_to_peer(id, tls.as_deref()).await {
            Ok(stream) => Some(run_link::<P>(id, stream, &tx, &opts, None).await),
            Err(e) if e.starts_with("TLS") => {
                say_once(id, e, &mut last_said);
                None
            }
            Err(e) => {
                tracing::debug!(peer = id, "{e}");
                None
            }
        };
        // Not there: try where another replica says it lives now (it moved
        // while we were down); the book takes the address once a link is up.
        if let Some(hint) = opts.book.hint(id).filter(|_| end.is_none()) {
            let mut there = PeerDialer::new(hint.clone(), crate::peer_dial::resolve_now);
            match there.connect_to_peer(id, tls.as_deref()).await {
                Ok(stream) => end = Some(run_link::<P>(id, stream, &tx, &opts, Some(&hint)).await),
                Err(e) => tracing::debug!(peer = id, "at {hint}, as a peer said: {e}"),
            }
        }
        match end {
            Some(LinkEnd::DriverGone) => return,
            Some(LinkEnd::Closed(why)) => {
                backoff = Duration::from_millis(20);
                tracing::warn!(peer = id, "link down: {why}");
            }
            Some(LinkEnd::Refused(why)) => say_once(id, why, &mut last_said),
            None => {}
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// Log `what` about peer `id` at warn level unless it was the last thing
/// said, at debug level if it was.
fn say_once(id: NodeId, what: String, last: &mut String) {
    if what == *last {
        tracing::debug!(peer = id, "{what}");
    } else {
        tracing::warn!(peer = id, "{what}");
        *last = what;
    }
}

/// Where replica `id` is dialled, for messages.
fn dialer_name(cluster: &crate::config::ClusterFile, id: NodeId) -> String {
    cluster.replica(id).map_or_else(|| "?".into(), |r| r.dial())
}

/// Where the acceptor challenges us, prove the cluster secret and read the
/// frame after; refuse an acceptor that does not prove ours.
async fn prove_secret<M: serde::Serialize + serde::de::DeserializeOwned>(
    id: NodeId,
    opts: &ServerOptions,
    ftx: &FrameTx<M>,
    reader: &mut FrameReader,
    my_nonce: &[u8],
    mut first: Result<Frame<M>, ReadError>,
) -> Result<Result<Frame<M>, ReadError>, LinkEnd> {
    if let Ok(Frame::PeerChallenge { nonce, proof }) = &first {
        let Some(secret) = &opts.secret else {
            let why = "it asks for the cluster secret and this replica has none";
            return Err(LinkEnd::Closed(format!("replica {id} refused: {why}")));
        };
        let cluster = opts.cluster.id();
        let me = opts.id;
        if !secret.verify(Side::Acceptor, &cluster, (id, me), (my_nonce, nonce), proof) {
            let why = format!(
                "replica {id} at {} failed to prove the cluster secret",
                dialer_name(&opts.cluster, id)
            );
            guard::refused(Refusal::Handshake, None, &why);
            return Err(LinkEnd::Closed(why));
        }
        let proof = secret.proof(Side::Dialler, &cluster, (me, id), (nonce, my_nonce));
        let _ = ftx.send(Frame::PeerProof {
            proof: proof.into(),
        });
        first = reader.next::<M>().await;
    } else if opts.secret.is_some() && first.is_ok() {
        // A replica without our secret must not get our traffic: it could
        // be anyone listening at that address.
        let why = format!("replica {id} did not prove the cluster secret (has it none?)");
        guard::refused(Refusal::Handshake, None, &why);
        return Err(LinkEnd::Closed(why));
    }
    Ok(first)
}

/// A link to replica `id` came up at `addr`, a peer's hint: the book takes
/// it (the file is rewritten off the runtime's workers).
fn confirm_hint(opts: &ServerOptions, id: NodeId, addr: &str) {
    let (book, addr) = (opts.book.clone(), addr.to_string());
    tokio::task::spawn_blocking(move || match book.confirm(id, &addr) {
        Ok(done) => tracing::warn!(peer = id, "found where a peer said: {done}"),
        Err(why) => tracing::warn!(peer = id, "linked at {addr}, not recorded: {why}"),
    });
}

/// One connection to replica `id`, until it fails. The link is up once the
/// peer answered our hello with any frame (it beats at once): a frozen
/// process still completes TCP handshakes, but must not count as up.
/// `hinted`: the address dialled came from a peer's book; once the link is
/// up the book takes it.
async fn run_link<P: Protocol + Send + 'static>(
    id: NodeId,
    stream: Conn,
    tx: &mpsc::Sender<Input<P::Msg>>,
    opts: &ServerOptions,
    hinted: Option<&str>,
) -> LinkEnd {
    let peer = Peer::Node(id);
    let (rd, wr) = stream.split();
    let (ftx, writer) = spawn_writer::<P::Msg>(wr, link_queue());
    ftx.set_delay(opts.peer_delay(id));
    let my_nonce = peer_auth::nonce();
    let _ = ftx.send(Frame::HelloPeer {
        node: opts.id,
        protocol: opts.cluster.protocol,
        nonce: my_nonce.clone().into(),
        version: Some(Version::ours()),
    });
    let mut reader = FrameReader::new(rd, opts.max_frame);
    // The replica we dialled may send its state in parts (a rejoin, a
    // recovery, a membership change's transfer).
    reader.allow_parts(crate::codec::MAX_TRANSFER);
    heartbeat::start(&ftx, &mut reader, opts.heartbeat);
    let first = reader.next::<P::Msg>().await;
    let first = match prove_secret(id, opts, &ftx, &mut reader, &my_nonce, first).await {
        Ok(first) => first,
        Err(end) => return end,
    };
    // The acceptor's book (wire 1.5): hints, and ours in answer, once (a
    // peer that sends more gets neither work nor answers for them).
    let heard = std::sync::atomic::AtomicBool::new(false);
    let hear = |addrs: Vec<(NodeId, String)>| {
        if heard.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        opts.book.hear((opts.id, id), &addrs, false);
        let _ = ftx.send(Frame::PeerBook {
            addrs: opts.book.all(),
        });
    };
    let first = match first {
        Ok(Frame::Heartbeat) => None,
        Ok(Frame::PeerBook { addrs }) => {
            hear(addrs);
            None
        }
        Ok(Frame::Proto(msg)) => Some(Input::Msg { from: peer, msg }),
        Ok(Frame::Error { message }) => {
            return LinkEnd::Refused(format!("peer refused us: {message}"))
        }
        Ok(_) => return LinkEnd::Closed("unexpected frame from peer".into()),
        Err(e) => return LinkEnd::Closed(format!("no answer to our hello: {e}")),
    };
    let up = Input::LinkUp {
        peer,
        tx: Some(ftx.clone()),
    };
    let inputs = std::iter::once(up).chain(first).collect();
    if tx.send(Input::Batch(inputs)).await.is_err() {
        return LinkEnd::DriverGone;
    }
    tracing::info!(peer = id, "link up");
    if let Some(addr) = hinted {
        confirm_hint(opts, id, addr);
    }
    let end = pump_link::<P::Msg>(&mut reader, peer, tx, Some(&hear)).await;
    if let LinkEnd::Closed(_) = end {
        let down = Input::LinkDown {
            peer,
            tx: Some(ftx.clone()),
        };
        let _ = tx.send(down).await;
    }
    drop(ftx);
    writer.abort();
    end
}
