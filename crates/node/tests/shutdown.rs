//! Graceful shutdown of a replica: requests already read are answered,
//! connections close cleanly (FIN, not a hang), and `server::run` returns
//! within its bound.

mod common;

use common::{listeners, Raw, Replica};
use quorumkv_core::protocol::abd::Msg;
use quorumkv_core::{Request, Response};
use quorumkv_node::client::{Client, ClientConfig, ClientMode};
use quorumkv_node::codec::Frame;
use quorumkv_node::net::ReadError;
use quorumkv_node::server::ServerOptions;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// `server::run` must return promptly once nothing is left to answer (far
/// within its drain timeout), with room for a slow machine.
const RETURNS_WITHIN: Duration = Duration::from_secs(4);

#[tokio::test]
async fn requests_read_before_shutdown_are_answered_then_the_connection_closes() {
    let (file, mut ls) = listeners(1).await;
    let mut replica = Replica::start(ServerOptions::new(1, file), ls.pop().unwrap());
    answers_then_close(&mut replica, None::<std::future::Ready<()>>).await;
}

#[tokio::test]
async fn links_stay_up_until_the_requests_in_flight_are_answered() {
    // Replicas 1 and 2 of 3: every write on 1 needs 2's answers, twice,
    // and what 1 sends to 2 is held up 300 ms by a proxy. So 1 is told to
    // stop while its writes wait for 2; its link to 2 must outlive the
    // clients' drain for them to be answered.
    let (mut file, mut ls) = listeners(3).await;
    drop(ls.pop());
    let l2 = ls.pop().unwrap();
    let l1 = ls.pop().unwrap();
    let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
    file.replicas[0].addr = proxy.local_addr().unwrap();
    let to_two = Arc::new(AtomicUsize::new(0));
    tokio::spawn(delaying_proxy(
        proxy,
        l1.local_addr().unwrap(),
        to_two.clone(),
    ));
    let slow_beats = |id| {
        let mut o = ServerOptions::new(id, file.clone());
        o.heartbeat.interval = Duration::from_secs(10);
        o.heartbeat.timeout = Duration::from_secs(30);
        o
    };
    let two = Replica::start(slow_beats(2), l2);
    let mut one = Replica::start(slow_beats(1), l1);
    let addr = one.addr;
    common::wait_until(Duration::from_secs(5), "link 1-2 up", || async {
        common::peers_up(addr).await == [2]
    })
    .await;
    let before = to_two.load(Ordering::Relaxed);
    let shut_down = async {
        // 200 queries are on their way to 2 (a heartbeat is 5 bytes).
        let to_two = to_two.clone();
        common::wait_until(Duration::from_secs(5), "queries sent", || {
            let sent = to_two.load(Ordering::Relaxed) - before;
            async move { sent >= 1000 }
        })
        .await;
    };
    answers_then_close(&mut one, Some(shut_down)).await;
    two.shut_down().await;
}

/// Forward connections to `to`, holding what comes back for 300 ms;
/// `back` counts the bytes that did.
async fn delaying_proxy(listener: TcpListener, to: SocketAddr, back: Arc<AtomicUsize>) {
    while let Ok((a, _)) = listener.accept().await {
        let b = TcpStream::connect(to).await.unwrap();
        let (mut ar, aw) = a.into_split();
        let (br, mut bw) = b.into_split();
        tokio::spawn(async move { tokio::io::copy(&mut ar, &mut bw).await });
        tokio::spawn(delayed_copy(br, aw, back.clone()));
    }
}

async fn delayed_copy(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, seen: Arc<AtomicUsize>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    tokio::spawn(async move {
        while let Some((at, bytes)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n @ 1..) = from.read(&mut buf).await {
        seen.fetch_add(n, Ordering::Relaxed);
        let due = Instant::now() + Duration::from_millis(300);
        if tx.send((due, buf[..n].to_vec())).is_err() {
            return;
        }
    }
}

/// Send 200 pipelined writes to `replica` in one segment and tell it to
/// shut down once `ready` resolves (`None`: once the first answer
/// arrives); all must be answered, then the connection closed, and `run`
/// must return.
async fn answers_then_close(replica: &mut Replica, ready: Option<impl Future<Output = ()>>) {
    let mut raw = Raw::connect(replica.addr).await;
    raw.send(&[Frame::hello_client()]).await;
    assert!(matches!(
        raw.next(RETURNS_WITHIN).await,
        Ok(Frame::Welcome { .. })
    ));
    // 200 pipelined writes in one segment; shut down as the first answer arrives.
    let n = 200u64;
    let reqs: Vec<Frame<Msg>> = (1..=n)
        .map(|id| Frame::Request {
            id,
            op: quorumkv_core::OpId::NONE,
            req: Request::Put {
                key: format!("k{id}").into(),
                value: "v".into(),
            },
        })
        .collect();
    raw.send(&reqs).await;
    let mut answered = vec![false; n as usize + 1];
    let first = match ready {
        Some(ready) => {
            ready.await;
            None
        }
        None => Some(raw.next(RETURNS_WITHIN).await),
    };
    replica.stop();
    let stopped = Instant::now();
    let mut frame = match first {
        Some(f) => f,
        None => raw.next(RETURNS_WITHIN).await,
    };
    let end = loop {
        match frame {
            Ok(Frame::Response { id, resp }) => {
                assert_eq!(resp, Response::Done, "request {id}");
                assert!(!std::mem::replace(&mut answered[id as usize], true));
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(e) => break e,
        }
        frame = raw.next(RETURNS_WITHIN).await;
    };
    assert!(matches!(end, ReadError::Closed), "closed with {end}");
    let missing: Vec<usize> = (1..=n as usize).filter(|&i| !answered[i]).collect();
    assert!(missing.is_empty(), "unanswered: {missing:?}");
    tokio::time::timeout(RETURNS_WITHIN, &mut replica.task)
        .await
        .expect("run returned")
        .unwrap()
        .unwrap();
    assert!(stopped.elapsed() < RETURNS_WITHIN);
    // It stopped accepting.
    assert!(TcpStream::connect(replica.addr).await.is_err());
}

#[tokio::test]
async fn busy_clients_get_answers_or_a_clean_error_never_a_hang() {
    let (file, mut ls) = listeners(1).await;
    let mut replica = Replica::start(ServerOptions::new(1, file), ls.pop().unwrap());
    let cfg = ClientConfig {
        mode: ClientMode::Proxy,
        connect_timeout: Duration::from_millis(500),
        ..ClientConfig::default()
    };
    let client = Client::connect([replica.addr], cfg).await.unwrap();
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let c = client.clone();
            tokio::spawn(async move {
                let mut done = 0u64;
                loop {
                    match c.put(format!("w{w}-{done}"), "v").await {
                        Ok(()) => done += 1,
                        Err(e) => return (done, e),
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    replica.stop();
    tokio::time::timeout(RETURNS_WITHIN, &mut replica.task)
        .await
        .expect("run returned")
        .unwrap()
        .unwrap();
    let mut total = 0;
    for w in workers {
        let (done, err) = tokio::time::timeout(RETURNS_WITHIN, w)
            .await
            .expect("a client call hung")
            .unwrap();
        assert!(
            matches!(
                err,
                quorumkv_node::client::ClientError::Disconnected
                    | quorumkv_node::client::ClientError::Connect(_)
            ),
            "{err}"
        );
        total += done;
    }
    assert!(total > 0, "the clients got answers before the shutdown");
}
