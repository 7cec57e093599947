//! A replica process: listeners for the native and RESP ports, links to the
//! other replicas, and one [`Driver`] running the protocol core.
//!
//! Links: replica `i` dials every replica `j < i` and keeps that one TCP
//! connection for traffic in both directions, redialling with backoff when it
//! breaks. So every pair of replicas shares exactly one connection.

use crate::codec::{Frame, DEFAULT_MAX_FRAME};
use crate::config::ClusterFile;
use crate::driver::{
    pump_link, Batcher, Driver, DriverGone, Input, LinkEnd, NodeInfo, ReplyTo, RespKind, RespTx,
};
use crate::net::{spawn_writer, FrameReader, ReadError};
use crate::resp::{parse_command, Reply};
use crate::storage::MemoryStorage;
use anyhow::Context;
use bytes::{Bytes, BytesMut};
use quorumkv_core::protocol::abd::{AbdNode, CoordinatorConfig};
use quorumkv_core::protocol::{Protocol, ProtocolKind};
use quorumkv_core::{NodeId, Peer, Request};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, Semaphore};

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
}

impl ServerOptions {
    pub fn new(id: NodeId, cluster: ClusterFile) -> Self {
        ServerOptions {
            id,
            cluster,
            op_timeout: Duration::from_secs(2),
            fast_read: true,
            thrifty: false,
            max_frame: DEFAULT_MAX_FRAME,
            max_connections: 4096,
            recover: false,
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
    let info = NodeInfo {
        id: opts.id,
        protocol: opts.cluster.protocol.to_string(),
        members: opts.cluster.members(),
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
    ))];
    if let Some(l) = listeners.resp {
        tasks.push(tokio::spawn(accept_resp::<P>(l, tx.clone(), opts.clone())));
    }
    if let Some(l) = listeners.metrics {
        tasks.push(tokio::spawn(accept_metrics::<P>(l, tx.clone())));
    }
    for r in opts.cluster.replicas.iter().filter(|r| r.id < opts.id) {
        tasks.push(tokio::spawn(dial_peer::<P>(
            r.id,
            r.addr,
            tx.clone(),
            opts.clone(),
        )));
    }
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
) {
    let max = opts.max_connections;
    let serve = move |stream: TcpStream, addr: SocketAddr| {
        let conn = conn_ids.fetch_add(1, Ordering::Relaxed);
        let (tx, opts) = (tx.clone(), opts.clone());
        async move {
            if let Err(e) = serve_native::<P>(stream, conn, tx, &opts).await {
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
async fn accept_limited<S, SF, R, RF>(
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
                });
            }
            Err(_) => drop(tokio::spawn(refuse(stream))),
        }
    }
}

async fn refuse_native<P: Protocol + Send + 'static>(stream: TcpStream, why: &str) {
    let (_, wr) = stream.into_split();
    let (ftx, task) = spawn_writer::<P::Msg>(wr);
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
) -> Result<(), ReadError> {
    let (rd, wr) = stream.into_split();
    let mut reader = FrameReader::new(rd, opts.max_frame);
    let (ftx, writer) = spawn_writer::<P::Msg>(wr);
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
    if let Err(ReadError::Codec(e)) = &result {
        let _ = ftx.send(Frame::Error {
            message: e.to_string(),
        });
    }
    let _ = batch.flush().await;
    if let Some(p) = peer {
        let _ = tx.send(Input::LinkDown { peer: p }).await;
    }
    drop(ftx);
    // The driver may still hold a clone for pending replies; give the writer
    // a moment to flush the error frame, then let the socket go.
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
    result
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
                let (ftx, writer) = spawn_writer::<P::Msg>(wr);
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

// ---------------------------------------------------------------- metrics

/// A minimal HTTP/1.0 endpoint: `GET /metrics` answers Prometheus text,
/// anything else 404. One request per connection.
async fn accept_metrics<P: Protocol + Send + 'static>(
    listener: TcpListener,
    tx: mpsc::Sender<Input<P::Msg>>,
) {
    let serve = move |stream: TcpStream, _| serve_metrics::<P>(stream, tx.clone());
    // Scrapers are few; more than this at once is a misbehaving client.
    accept_limited(listener, 64, serve, |_| async {}).await;
}

async fn serve_metrics<P: Protocol + Send + 'static>(
    mut stream: TcpStream,
    tx: mpsc::Sender<Input<P::Msg>>,
) {
    let mut req = Vec::with_capacity(512);
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = [0u8; 1024];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 8192 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => req.extend_from_slice(&buf[..n]),
            }
        }
    });
    if read.await.is_err() {
        return;
    }
    let (status, body) = if req.starts_with(b"GET /metrics ") || req.starts_with(b"GET /metrics?") {
        let (otx, orx) = oneshot::channel();
        if tx.send(Input::Metrics { reply: otx }).await.is_err() {
            return;
        }
        ("200 OK", orx.await.unwrap_or_default())
    } else {
        (
            "404 Not Found",
            "quorumkv serves /metrics only\n".to_string(),
        )
    };
    let head = format!(
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

// ------------------------------------------------------------------- RESP

async fn accept_resp<P: Protocol + Send + 'static>(
    listener: TcpListener,
    tx: mpsc::Sender<Input<P::Msg>>,
    opts: Arc<ServerOptions>,
) {
    let max = opts.max_connections;
    let serve = move |stream: TcpStream, _| {
        let (tx, opts) = (tx.clone(), opts.clone());
        async move { serve_resp::<P>(stream, tx, &opts).await }
    };
    let refuse = |mut stream: TcpStream| async move {
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
    };
    accept_limited(listener, max, serve, refuse).await;
}

/// Serve one RESP connection. Commands are pipelined: each gets a sequence
/// number, store operations run concurrently in the core, and the writer
/// puts the replies back in request order, as RESP requires.
async fn serve_resp<P: Protocol + Send + 'static>(
    stream: TcpStream,
    tx: mpsc::Sender<Input<P::Msg>>,
    opts: &ServerOptions,
) {
    let (mut rd, wr) = stream.into_split();
    let (rtx, rrx) = crate::net::out_queue::<(u64, Reply)>();
    let writer = tokio::spawn(resp_writer(wr, rrx));
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut seq = 0u64;
    'conn: loop {
        loop {
            let args = match parse_command(&mut buf) {
                Ok(Some(args)) => args,
                Ok(None) => break,
                Err(e) => {
                    let _ = rtx.send((seq, Reply::Error(format!("ERR {e}"))));
                    break 'conn;
                }
            };
            if args.is_empty() {
                continue; // an empty inline line
            }
            match resp_command(&args, opts) {
                RespAction::Reply(r) => drop(rtx.send((seq, r))),
                RespAction::Quit => {
                    let _ = rtx.send((seq, Reply::Simple("OK")));
                    break 'conn;
                }
                RespAction::Store(req, kind) => {
                    let reply = ReplyTo::Resp {
                        tx: rtx.clone(),
                        seq,
                        kind,
                    };
                    if tx.send(Input::Client { req, reply }).await.is_err() {
                        break 'conn;
                    }
                }
                RespAction::Info => {
                    let (otx, orx) = oneshot::channel();
                    if tx.send(Input::Info { reply: otx }).await.is_err() {
                        break 'conn;
                    }
                    spawn_info_reply(orx, rtx.clone(), seq);
                }
            }
            seq += 1;
            if rtx.is_closed() {
                break 'conn; // cut off for not reading its replies
            }
        }
        if buf.len() > 64 * 1024 * 1024 {
            let _ = rtx.send((seq, Reply::Error("ERR request too large".into())));
            break;
        }
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    drop(rtx);
    let _ = writer.await;
}

fn spawn_info_reply(orx: oneshot::Receiver<String>, rtx: RespTx, seq: u64) {
    tokio::spawn(async move {
        let text = orx.await.unwrap_or_default();
        let _ = rtx.send((seq, Reply::Bulk(Some(Bytes::from(text)))));
    });
}

async fn resp_writer(
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    mut rx: crate::net::OutQueueRx<(u64, Reply)>,
) {
    let mut next = 0u64;
    let mut waiting: BTreeMap<u64, Reply> = BTreeMap::new();
    let mut out = BytesMut::with_capacity(16 * 1024);
    while let Some((seq, reply)) = rx.recv().await {
        waiting.insert(seq, reply);
        while let Some((seq, reply)) = rx.try_recv() {
            waiting.insert(seq, reply);
        }
        while let Some(r) = waiting.remove(&next) {
            r.encode(&mut out);
            next += 1;
        }
        if !out.is_empty() {
            if wr.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
    }
    let _ = wr.shutdown().await;
}

/// `CONFIG GET name`: quorumkv has no Redis settings, but redis-benchmark
/// asks for `save` and `appendonly` to describe the server; answer those
/// truthfully (no snapshots, no append-only file) and nothing else.
fn config_get(name: &Bytes) -> Reply {
    let value = match &name.to_ascii_lowercase()[..] {
        b"save" => "",
        b"appendonly" => "no",
        _ => return Reply::Array(vec![]),
    };
    Reply::Array(vec![
        Reply::Bulk(Some(name.clone())),
        Reply::Bulk(Some(Bytes::from_static(value.as_bytes()))),
    ])
}

enum RespAction {
    Reply(Reply),
    Store(Request, RespKind),
    Info,
    Quit,
}

fn wrong_args(cmd: &str) -> RespAction {
    RespAction::Reply(Reply::Error(format!(
        "ERR wrong number of arguments for '{cmd}' command"
    )))
}

/// Decide what one RESP command does. Store commands go to the core; the
/// rest are answered here.
fn resp_command(args: &[Bytes], opts: &ServerOptions) -> RespAction {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    let argc = args.len();
    match name.as_str() {
        "get" if argc == 2 => RespAction::Store(
            Request::Get {
                key: args[1].clone(),
            },
            RespKind::Get,
        ),
        "set" if argc == 3 => RespAction::Store(
            Request::Put {
                key: args[1].clone(),
                value: args[2].clone(),
            },
            RespKind::Set,
        ),
        "set" if argc > 3 => RespAction::Reply(Reply::Error(
            "ERR syntax error: quorumkv supports SET key value without options".into(),
        )),
        "del" if argc == 2 => RespAction::Store(
            Request::Delete {
                key: args[1].clone(),
            },
            RespKind::Del,
        ),
        "del" if argc > 2 => {
            RespAction::Reply(Reply::Error("ERR quorumkv deletes one key per DEL".into()))
        }
        "ping" if argc == 1 => RespAction::Reply(Reply::Simple("PONG")),
        "ping" if argc == 2 => RespAction::Reply(Reply::Bulk(Some(args[1].clone()))),
        "echo" if argc == 2 => RespAction::Reply(Reply::Bulk(Some(args[1].clone()))),
        "info" => RespAction::Info,
        "quit" => RespAction::Quit,
        "select" if argc == 2 && &args[1][..] == b"0" => RespAction::Reply(Reply::Simple("OK")),
        // Clients probe these on connect (redis-cli: COMMAND DOCS;
        // redis-benchmark: CONFIG GET save/appendonly).
        "command" => RespAction::Reply(Reply::Array(vec![])),
        "config" if argc == 3 && args[1].eq_ignore_ascii_case(b"get") => {
            RespAction::Reply(config_get(&args[2]))
        }
        "client" => RespAction::Reply(Reply::Simple("OK")),
        "hello" => RespAction::Reply(Reply::Error("NOPROTO quorumkv speaks RESP2 only".into())),
        "get" | "set" | "del" | "ping" | "echo" | "select" => wrong_args(&name),
        _ => {
            let _ = opts;
            let shown: String = String::from_utf8_lossy(&args[0]).chars().take(64).collect();
            RespAction::Reply(Reply::Error(format!(
                "ERR unknown command '{shown}' (quorumkv supports GET, SET, DEL, PING, ECHO, INFO, QUIT)"
            )))
        }
    }
}
