//! In-process replicas and raw native connections for the link tests.
#![allow(dead_code)] // each test file uses part of it

use quorumkv_core::protocol::abd::Msg;
use quorumkv_core::protocol::ProtocolKind;
use quorumkv_core::NodeId;
use quorumkv_node::codec::{encode_to_bytes, Frame, DEFAULT_MAX_FRAME};
use quorumkv_node::config::{ClusterFile, ReplicaAddr};
use quorumkv_node::net::{FrameReader, ReadError};
use quorumkv_node::server::{self, Listeners, ServerOptions};
use quorumkv_node::stream::{Conn, ConnWrite};
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The protocol of these tests' clusters.
pub fn abd() -> ProtocolKind {
    "abd".parse().expect("abd is registered")
}

/// Loopback listeners for replicas 1..=n (some are then served by fakes).
pub async fn listeners(n: usize) -> (ClusterFile, Vec<TcpListener>) {
    let mut ls = Vec::new();
    let mut replicas = Vec::new();
    for id in 1..=n {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        replicas.push(ReplicaAddr::at(id as NodeId, l.local_addr().unwrap()));
        ls.push(l);
    }
    let file = ClusterFile::new(abd(), replicas);
    (file, ls)
}

/// A replica running in this process until `stop` is called.
pub struct Replica {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<anyhow::Result<()>>,
}

impl Replica {
    pub fn start(opts: ServerOptions, native: TcpListener) -> Replica {
        let addr = native.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let listeners = Listeners {
            native,
            resp: None,
            zk: None,
            metrics: None,
        };
        let task = tokio::spawn(server::run(opts, listeners, async {
            let _ = stopped.await;
        }));
        Replica {
            addr,
            stop: Some(stop),
            task,
        }
    }
    /// Shut it down and wait for `run` to return (it must succeed).
    pub async fn shut_down(mut self) {
        self.stop();
        self.task.await.unwrap().unwrap();
    }
    /// Tell it to shut down (its `run` then returns).
    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Options with fast heartbeats (for tests that wait for a timeout).
pub fn fast_opts(id: NodeId, file: &ClusterFile, interval_ms: u64) -> ServerOptions {
    let mut opts = ServerOptions::new(id, file.clone());
    opts.heartbeat.interval = Duration::from_millis(interval_ms);
    opts.heartbeat.timeout = Duration::from_millis(5 * interval_ms);
    opts
}

/// The peers replica `addr` has a live link to, as its status says.
pub async fn peers_up(addr: SocketAddr) -> Vec<NodeId> {
    quorumkv_node::status::fetch(addr, Duration::from_secs(2))
        .await
        .expect("status")
        .peers_up
}

/// Poll `check` every 20 ms until it holds; panics with `what` after `within`.
pub async fn wait_until<F, Fut>(within: Duration, what: &str, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return start.elapsed();
        }
        assert!(start.elapsed() < within, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A raw native connection, for playing a peer or client by hand.
pub struct Raw {
    pub reader: FrameReader,
    pub wr: ConnWrite,
}

impl Raw {
    pub fn new(stream: TcpStream) -> Raw {
        Raw::over(Conn::Plain(stream))
    }
    /// A raw connection over plain TCP or TLS.
    pub fn over(conn: Conn) -> Raw {
        let (rd, wr) = conn.split();
        Raw {
            reader: FrameReader::new(rd, DEFAULT_MAX_FRAME),
            wr,
        }
    }
    pub async fn connect(addr: SocketAddr) -> Raw {
        Raw::new(TcpStream::connect(addr).await.unwrap())
    }
    pub async fn send(&mut self, frames: &[Frame<Msg>]) {
        let mut bytes = Vec::new();
        for f in frames {
            bytes.extend_from_slice(&encode_to_bytes(f));
        }
        self.wr.write_all(&bytes).await.unwrap();
        self.wr.flush().await.unwrap();
    }
    /// The next frame, or why there is none; panics after `within`.
    pub async fn next(&mut self, within: Duration) -> Result<Frame<Msg>, ReadError> {
        tokio::time::timeout(within, self.reader.next::<Msg>())
            .await
            .expect("the other side neither sent a frame nor closed")
    }
}
