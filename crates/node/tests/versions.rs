//! Wire versions over real TCP: hellos of another major version, by hand,
//! are refused with a message naming both versions and counted, while the
//! replica keeps serving others; hellos without a version (releases before
//! version fields) interoperate; a client refuses a replica of another
//! major; a dialler refused by its peer backs off instead of redialling hot.

mod common;

use common::{abd, fast_opts, listeners, peers_up, wait_until, Raw, Replica};
use quorumkv_core::protocol::abd::Msg;
use quorumkv_core::NodeId;
use quorumkv_node::client::{Client, ClientConfig};
use quorumkv_node::codec::Frame;
use quorumkv_node::guard::VERSIONS_REFUSED;
use quorumkv_node::net::ReadError;
use quorumkv_node::version::{Version, WIRE_MAJOR, WIRE_MINOR};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

const BEAT_MS: u64 = 100;
/// Room for a slow, shared machine.
const SLACK: Duration = Duration::from_secs(5);

fn future() -> Option<Version> {
    Some(Version {
        major: WIRE_MAJOR + 1,
        minor: 0,
        release: "9.0.0".into(),
    })
}

fn hello_peer(node: NodeId, version: Option<Version>) -> Frame<Msg> {
    Frame::HelloPeer {
        node,
        protocol: abd(),
        nonce: vec![3u8; 32].into(),
        version,
    }
}

/// The error frame the other side sends before it closes (heartbeats skipped).
async fn refusal(raw: &mut Raw) -> String {
    loop {
        match raw.next(SLACK).await {
            Ok(Frame::Error { message }) => return message,
            Ok(Frame::Heartbeat) => continue,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

/// Replicas 1..=n with links to one another.
async fn cluster(n: usize) -> (Vec<Replica>, Vec<SocketAddr>) {
    let (file, ls) = listeners(n).await;
    let replicas: Vec<Replica> = (ls.into_iter().enumerate())
        .map(|(i, l)| Replica::start(fast_opts(i as NodeId + 1, &file, BEAT_MS), l))
        .collect();
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    for (i, &a) in addrs.iter().enumerate() {
        let want = n - 1;
        wait_until(
            SLACK,
            &format!("replica {} has its links", i + 1),
            || async move { peers_up(a).await.len() == want },
        )
        .await;
    }
    (replicas, addrs)
}

async fn put_and_get(addrs: &[SocketAddr], key: &str) {
    let c = Client::connect(addrs.iter().copied(), ClientConfig::default())
        .await
        .unwrap();
    c.put(key.to_string(), "v".to_string()).await.unwrap();
    let got = c.get(key.to_string()).await.unwrap();
    assert_eq!(got.as_deref(), Some(&b"v"[..]));
}

#[tokio::test]
async fn a_peer_and_a_client_of_another_major_are_refused_and_others_served() {
    let (replicas, addrs) = cluster(3).await;
    let before = VERSIONS_REFUSED.load(Ordering::Relaxed);
    // A "replica 3" of the next major wire version dials replica 1.
    let mut peer = Raw::connect(addrs[0]).await;
    let start = tokio::time::Instant::now();
    peer.send(&[hello_peer(3, future())]).await;
    let why = refusal(&mut peer).await;
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "refused after {:?}: an older dialler would redial hot",
        start.elapsed()
    );
    let ours = format!("wire {WIRE_MAJOR}.{WIRE_MINOR}");
    assert!(
        why.starts_with(&format!(
            "VERSION replica 3 speaks wire {}.0 (quorumkv 9.0.0); this replica speaks {ours}",
            WIRE_MAJOR + 1
        )),
        "{why}"
    );
    assert!(why.contains("rolling upgrade"), "{why}");
    assert!(matches!(
        peer.next(SLACK).await,
        Err(ReadError::Closed | ReadError::Io(_))
    ));
    // A client of the next major, to replica 2.
    let mut client = Raw::connect(addrs[1]).await;
    client
        .send(&[Frame::HelloClient { version: future() }])
        .await;
    let why = refusal(&mut client).await;
    let want = format!(
        "this client speaks wire {}.0 (quorumkv 9.0.0)",
        WIRE_MAJOR + 1
    );
    assert!(why.contains(&want) && why.contains(&ours), "{why}");
    assert!(VERSIONS_REFUSED.load(Ordering::Relaxed) >= before + 2);
    // Nothing else changed: the real links stay, and clients are served.
    for (i, &a) in addrs.iter().enumerate() {
        assert_eq!(peers_up(a).await.len(), 2, "replica {}'s links", i + 1);
    }
    put_and_get(&addrs, "after-refusals").await;
    for r in replicas {
        r.shut_down().await;
    }
}

#[tokio::test]
async fn unversioned_hellos_of_older_releases_interoperate() {
    // Replica 1 of 2; the test plays replica 2 of a release before version
    // fields, then a client of such a release.
    let (file, mut ls) = listeners(2).await;
    drop(ls.pop());
    let replica = Replica::start(fast_opts(1, &file, BEAT_MS), ls.pop().unwrap());
    let addr = replica.addr;
    let mut old_peer = Raw::connect(addr).await;
    old_peer.send(&[hello_peer(2, None)]).await;
    wait_until(SLACK, "link to the unversioned replica 2", || async {
        peers_up(addr).await == [2]
    })
    .await;
    let mut old_client = Raw::connect(addr).await;
    old_client
        .send(&[Frame::HelloClient { version: None }])
        .await;
    match old_client.next(SLACK).await.unwrap() {
        Frame::Welcome { version, .. } => assert_eq!(version, Some(Version::ours())),
        other => panic!("expected a welcome, got {other:?}"),
    }
    let status = quorumkv_node::status::fetch(addr, SLACK).await.unwrap();
    assert_eq!(status.wire, Some(Version::ours()));
    drop((old_peer, old_client));
    replica.shut_down().await;
}

#[tokio::test]
async fn a_client_refuses_a_replica_of_another_major() {
    let fake = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = fake.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (s, _) = fake.accept().await.unwrap();
        let mut raw = Raw::new(s);
        let hello = raw.next(SLACK).await.unwrap();
        assert_eq!(
            hello,
            Frame::HelloClient {
                version: Some(Version::ours())
            }
        );
        raw.send(&[Frame::Welcome {
            node: 1,
            protocol: abd(),
            members: vec![1],
            options: Vec::new(),
            addrs: Vec::new(),
            role: None,
            version: future(),
        }])
        .await;
        let _ = raw.next(SLACK).await;
    });
    let cfg = ClientConfig {
        connect_timeout: Duration::from_secs(2),
        ..ClientConfig::default()
    };
    let err = Client::connect([addr], cfg).await.err().expect("refused");
    let err = err.to_string();
    let want = format!(
        "the replica speaks wire {}.0 (quorumkv 9.0.0)",
        WIRE_MAJOR + 1
    );
    assert!(err.contains(&want), "{err}");
    server.abort();
}

#[tokio::test]
async fn a_dialler_refused_by_its_peer_backs_off() {
    // Replica 2 dials replica 1, played by the test, which refuses every
    // hello at once as a replica of another version would.
    let (file, mut ls) = listeners(2).await;
    let replica = Replica::start(fast_opts(2, &file, BEAT_MS), ls.pop().unwrap());
    let fake = ls.pop().unwrap();
    let window = Duration::from_millis(1500);
    let start = tokio::time::Instant::now();
    let mut dials = 0;
    while start.elapsed() < window {
        let left = window.saturating_sub(start.elapsed());
        let Ok(Ok((s, _))) = tokio::time::timeout(left, fake.accept()).await else {
            break;
        };
        dials += 1;
        let mut raw = Raw::new(s);
        assert!(matches!(
            raw.next(SLACK).await,
            Ok(Frame::HelloPeer { node: 2, .. })
        ));
        raw.send(&[Frame::Error {
            message: "VERSION refused by hand".into(),
        }])
        .await;
    }
    // Backing off 20 ms, doubled to 1 s: 7 dials in 1.5 s; a dialler that
    // redials at once would make about 75.
    assert!((2..=10).contains(&dials), "{dials} dials in {window:?}");
    assert!(peers_up(replica.addr).await.is_empty());
    replica.shut_down().await;
}
