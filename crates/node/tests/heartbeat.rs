//! The heartbeat failure detector of native links: a peer that stops
//! answering without closing its socket is declared down within the
//! heartbeat timeout; a quiet but healthy link is not.

mod common;

use common::{abd, fast_opts, listeners, peers_up, wait_until, Raw, Replica};
use quorumkv_core::protocol::abd::Msg;
use quorumkv_node::client::{Client, ClientConfig};
use quorumkv_node::codec::Frame;
use quorumkv_node::net::ReadError;
use std::time::Duration;

/// Heartbeat interval of these tests; the timeout is five of them.
const BEAT_MS: u64 = 100;
const TIMEOUT: Duration = Duration::from_millis(5 * BEAT_MS);
/// Room for a slow, shared machine on top of the timeout.
const SLACK: Duration = Duration::from_secs(3);

fn hello_peer(node: u32) -> Frame<Msg> {
    Frame::HelloPeer {
        node,
        protocol: abd(),
        nonce: vec![0u8; 32].into(),
        version: Some(quorumkv_node::version::Version::ours()),
    }
}

/// Whether `f` is replica `node`'s hello (its nonce is fresh every time).
fn is_hello_of(f: &Frame<Msg>, node: u32) -> bool {
    matches!(f, Frame::HelloPeer { node: n, protocol, nonce, .. } if *n == node && *protocol == abd() && nonce.len() == 32)
}

/// Read what the other side sends until it closes; returns the heartbeats
/// counted and the error frame, if any.
async fn read_until_closed(raw: &mut Raw) -> (usize, Option<String>) {
    let (mut beats, mut error) = (0, None);
    loop {
        match raw.next(SLACK).await {
            Ok(Frame::Heartbeat) => beats += 1,
            Ok(Frame::PeerBook { .. }) => {} // wire 1.5: the replica's book
            Ok(Frame::Error { message }) => error = Some(message),
            Ok(f) => panic!("unexpected frame {f:?}"),
            Err(ReadError::Closed) | Err(ReadError::Io(_)) => return (beats, error),
            Err(e) => panic!("{e}"),
        }
    }
}

/// Replica 2 of 2, and the listener of replica 1 (played by the test).
async fn replica_2_dialling_a_fake() -> (Replica, tokio::net::TcpListener) {
    let (file, mut ls) = listeners(2).await;
    let native = ls.pop().unwrap();
    let replica = Replica::start(fast_opts(2, &file, BEAT_MS), native);
    (replica, ls.pop().unwrap())
}

#[tokio::test]
async fn a_dialled_replica_that_goes_silent_is_declared_down() {
    // Replica 2 dials replica 1, a fake that accepts once, reads the hello,
    // answers one heartbeat and then neither answers nor closes.
    let (replica, fake) = replica_2_dialling_a_fake().await;
    let (stream, _) = fake.accept().await.unwrap();
    drop(fake); // redials are refused
    let mut raw = Raw::new(stream);
    assert!(is_hello_of(&raw.next(SLACK).await.unwrap(), 2));
    raw.send(&[Frame::Heartbeat]).await;
    let addr = replica.addr;
    wait_until(SLACK, "link to 1 up", || async {
        peers_up(addr).await == [1]
    })
    .await;
    let took = wait_until(TIMEOUT + SLACK, "link to 1 declared down", || async {
        peers_up(addr).await.is_empty()
    })
    .await;
    let (beats, _) = read_until_closed(&mut raw).await;
    assert!(beats >= 1, "the replica sent heartbeats ({beats})");
    eprintln!("declared down after {took:?}");
    replica.shut_down().await;
}

#[tokio::test]
async fn a_replica_that_accepts_but_never_answers_is_never_up() {
    // A frozen process still completes TCP handshakes (the kernel does).
    let (replica, fake) = replica_2_dialling_a_fake().await;
    let (first, _) = fake.accept().await.unwrap();
    let start = tokio::time::Instant::now();
    // Watched until the replica gives up on it and dials again.
    let again = fake.accept();
    tokio::pin!(again);
    let second = loop {
        assert_eq!(
            peers_up(replica.addr).await,
            [],
            "a silent peer counted as up"
        );
        tokio::select! {
            s = &mut again => break s.unwrap().0,
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        assert!(start.elapsed() < TIMEOUT + SLACK, "no redial");
    };
    assert!(
        start.elapsed() >= TIMEOUT / 2,
        "gave up after {:?}",
        start.elapsed()
    );
    let mut first = Raw::new(first);
    assert!(is_hello_of(&first.next(SLACK).await.unwrap(), 2));
    let (beats, _) = read_until_closed(&mut first).await;
    assert!(beats >= 1);
    drop(second);
    replica.shut_down().await;
}

/// Replica 1 of 2, once the test (playing replica 2) dialled it and its
/// link is up.
async fn replica_1_dialled_by_a_fake() -> (Replica, Raw) {
    let (file, mut ls) = listeners(2).await;
    drop(ls.pop());
    let replica = Replica::start(fast_opts(1, &file, BEAT_MS), ls.pop().unwrap());
    let mut raw = Raw::connect(replica.addr).await;
    raw.send(&[hello_peer(2)]).await;
    let addr = replica.addr;
    wait_until(SLACK, "link to 2 up", || async {
        peers_up(addr).await == [2]
    })
    .await;
    (replica, raw)
}

#[tokio::test]
async fn a_replica_that_dialled_us_and_goes_silent_is_declared_down() {
    let (replica, mut raw) = replica_1_dialled_by_a_fake().await;
    let addr = replica.addr;
    wait_until(TIMEOUT + SLACK, "link to 2 declared down", || async {
        peers_up(addr).await.is_empty()
    })
    .await;
    let (beats, error) = read_until_closed(&mut raw).await;
    assert!(beats >= 1, "the replica sent heartbeats ({beats})");
    let error = error.expect("told why");
    assert!(error.contains("heartbeats lost"), "{error}");
    replica.shut_down().await;
}

#[tokio::test]
async fn a_quiet_link_that_beats_stays_up_over_several_timeouts() {
    // The fake replica 2 sends nothing but heartbeats; the link must stay
    // up, and (since the fake never redials) the socket open, throughout.
    let (replica, raw) = replica_1_dialled_by_a_fake().await;
    let addr = replica.addr;
    let Raw { mut reader, mut wr } = raw;
    let beating = tokio::spawn(async move {
        loop {
            let beat = quorumkv_node::codec::encode_to_bytes::<Msg>(&Frame::Heartbeat);
            tokio::io::AsyncWriteExt::write_all(&mut wr, &beat)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(BEAT_MS)).await;
        }
    });
    let listening = tokio::spawn(async move {
        let mut beats = 0usize;
        loop {
            match reader.next::<Msg>().await {
                Ok(Frame::Heartbeat) => beats += 1,
                Ok(Frame::PeerBook { .. }) => {}
                other => return (beats, format!("{other:?}")),
            }
        }
    });
    let watch = tokio::time::Instant::now();
    while watch.elapsed() < 5 * TIMEOUT {
        assert_eq!(peers_up(addr).await, [2], "after {:?}", watch.elapsed());
        assert!(!listening.is_finished(), "the replica closed a live link");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    replica.shut_down().await;
    beating.abort();
    let (beats, end) = listening.await.unwrap();
    // Idle for 5 timeouts = 25 intervals: the replica beat all along.
    assert!(beats >= 10, "only {beats} heartbeats ({end})");
}

#[tokio::test]
async fn two_idle_replicas_keep_their_link() {
    let (file, mut ls) = listeners(2).await;
    let two = Replica::start(fast_opts(2, &file, BEAT_MS), ls.pop().unwrap());
    let one = Replica::start(fast_opts(1, &file, BEAT_MS), ls.pop().unwrap());
    let (a1, a2) = (one.addr, two.addr);
    wait_until(SLACK, "both links up", || async {
        peers_up(a1).await == [2] && peers_up(a2).await == [1]
    })
    .await;
    let watch = tokio::time::Instant::now();
    while watch.elapsed() < 5 * TIMEOUT {
        assert_eq!(peers_up(a1).await, [2]);
        assert_eq!(peers_up(a2).await, [1]);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    one.shut_down().await;
    two.shut_down().await;
}

#[tokio::test]
async fn a_silent_client_side_coordinator_is_dropped_but_proxy_clients_are_not() {
    let (file, mut ls) = listeners(1).await;
    let replica = Replica::start(fast_opts(1, &file, BEAT_MS), ls.pop().unwrap());
    // A coordinator asks for heartbeats by sending one, then goes silent.
    let mut coordinator = Raw::connect(replica.addr).await;
    coordinator
        .send(&[Frame::hello_client(), Frame::Heartbeat])
        .await;
    assert!(matches!(
        coordinator.next(SLACK).await,
        Ok(Frame::Welcome { .. })
    ));
    // A proxy-style client sends no heartbeat and gets none.
    let mut proxy = Raw::connect(replica.addr).await;
    proxy.send(&[Frame::hello_client()]).await;
    assert!(matches!(proxy.next(SLACK).await, Ok(Frame::Welcome { .. })));

    let start = tokio::time::Instant::now();
    let (beats, error) = read_until_closed(&mut coordinator).await;
    assert!(beats >= 1);
    assert!(error.expect("told why").contains("heartbeats lost"));
    assert!(start.elapsed() < TIMEOUT + SLACK);
    let quiet = tokio::time::timeout(3 * TIMEOUT, proxy.reader.next::<Msg>()).await;
    assert!(quiet.is_err(), "a proxy client got {quiet:?}");
    replica.shut_down().await;
}

#[tokio::test]
async fn the_client_library_redials_a_replica_that_went_silent() {
    // A fake replica answers the hello, then freezes. The client's
    // coordinator link (default heartbeats: 1 s) must give up on it and
    // redial.
    let fake = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = fake.local_addr().unwrap();
    let serve = tokio::spawn(async move {
        let mut frozen = Vec::new();
        for _ in 0..2 {
            let (s, _) = fake.accept().await.unwrap();
            let mut raw = Raw::new(s);
            assert_eq!(raw.next(SLACK).await.unwrap(), Frame::hello_client());
            raw.send(&[Frame::Welcome {
                node: 1,
                protocol: abd(),
                members: vec![1],
                options: Vec::new(),
                addrs: Vec::new(),
                role: None,
                version: Some(quorumkv_node::version::Version::ours()),
            }])
            .await;
            frozen.push(raw);
        }
        frozen
    });
    let cfg = ClientConfig::default();
    let client = Client::connect([addr], cfg).await.unwrap();
    let mut frozen = tokio::time::timeout(Duration::from_secs(1) + SLACK, serve)
        .await
        .expect("the client redialled")
        .unwrap();
    // The first connection was closed by the client, after heartbeats.
    let (beats, _) = read_until_closed(&mut frozen[0]).await;
    assert!(beats >= 1);
    drop(client);
}
