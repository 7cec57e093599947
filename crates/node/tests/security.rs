//! Attacks on replica links from a stray connection (not a replica), each
//! scripted as it was found from outside, with the data and the quorum
//! intact throughout: impostor hellos (the six-hello quorum cut), a hello
//! without the cluster secret's proof, and peer-only protocol messages from
//! a client connection.

mod common;

use bytes::Bytes;
use common::{fast_opts, listeners, peers_up, wait_until, Replica};
use quorumkv_core::protocol::ProtocolKind;
use quorumkv_core::{NodeId, Tag};
use quorumkv_node::client::{Client, ClientConfig, ClientMode};
use quorumkv_node::codec::{encode_to_bytes, Frame, DEFAULT_MAX_FRAME};
use quorumkv_node::net::FrameReader;
use quorumkv_node::peer_auth::{self, ClusterSecret, Side};
use quorumkv_node::server::ServerOptions;
use serde::{de::DeserializeOwned, Serialize};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const BEAT_MS: u64 = 100;
/// Room for a slow, shared machine.
const SLACK: Duration = Duration::from_secs(5);

fn secret() -> ClusterSecret {
    ClusterSecret::from_text("a test secret of enough bytes").unwrap()
}

/// `n` replicas of `protocol` on loopback, with or without a cluster secret,
/// each with links to all others.
async fn cluster(
    protocol: &str,
    n: usize,
    secret: Option<ClusterSecret>,
) -> (
    Vec<Replica>,
    Vec<SocketAddr>,
    quorumkv_node::config::ClusterFile,
) {
    let (mut file, ls) = listeners(n).await;
    file.protocol = protocol.parse::<ProtocolKind>().unwrap();
    let mut replicas = Vec::new();
    for (i, l) in ls.into_iter().enumerate() {
        let mut opts: ServerOptions = fast_opts(i as NodeId + 1, &file, BEAT_MS);
        opts.secret = secret.clone();
        replicas.push(Replica::start(opts, l));
    }
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    all_links_up(&addrs).await;
    (replicas, addrs, file)
}

async fn all_links_up(addrs: &[SocketAddr]) {
    let n = addrs.len() as NodeId;
    for (i, &a) in addrs.iter().enumerate() {
        let me = i as NodeId + 1;
        let want: Vec<NodeId> = (1..=n).filter(|&j| j != me).collect();
        wait_until(
            SLACK,
            &format!("replica {me} has links to {want:?}"),
            || {
                let want = want.clone();
                async move { peers_up(a).await == want }
            },
        )
        .await;
    }
}

/// Every replica keeps every link for `span` (sampled every 20 ms).
async fn links_stay_up(addrs: &[SocketAddr], span: Duration) {
    let n = addrs.len() as NodeId;
    let start = tokio::time::Instant::now();
    while start.elapsed() < span {
        for (i, &a) in addrs.iter().enumerate() {
            let me = i as NodeId + 1;
            let want: Vec<NodeId> = (1..=n).filter(|&j| j != me).collect();
            assert_eq!(peers_up(a).await, want, "replica {me}'s links");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The attack changed nothing: every link stays up for `beats` heartbeat
/// intervals, and a write of `key` and reads of it through every replica
/// work; then the replicas stop.
async fn still_whole_then_stop(
    replicas: Vec<Replica>,
    addrs: &[SocketAddr],
    beats: u64,
    key: &str,
) {
    links_stay_up(addrs, Duration::from_millis(beats * BEAT_MS)).await;
    writes_and_reads_work(addrs, key, "v").await;
    for r in replicas {
        r.shut_down().await;
    }
}

async fn client(addrs: &[SocketAddr], mode: ClientMode) -> Client {
    let cfg = ClientConfig {
        mode,
        ..ClientConfig::default()
    };
    Client::connect(addrs.iter().copied(), cfg).await.unwrap()
}

/// A write and a read through every replica succeed and agree.
async fn writes_and_reads_work(addrs: &[SocketAddr], key: &str, value: &str) {
    let c = client(addrs, ClientMode::Proxy).await;
    c.put(key.to_string(), value.to_string()).await.unwrap();
    for &a in addrs {
        let one = client(&[a], ClientMode::Proxy).await;
        let got = one.get(key.to_string()).await.unwrap();
        assert_eq!(got, Some(Bytes::from(value.to_string())), "read at {a}");
    }
}

/// A raw connection speaking any protocol's messages.
struct Stray {
    reader: FrameReader,
    wr: quorumkv_node::stream::ConnWrite,
}

impl Stray {
    async fn connect(addr: SocketAddr) -> Stray {
        let stream = TcpStream::connect(addr).await.unwrap();
        let (rd, wr) = quorumkv_node::stream::Conn::from(stream).split();
        Stray {
            reader: FrameReader::new(rd, DEFAULT_MAX_FRAME),
            wr,
        }
    }
    async fn send<M: Serialize>(&mut self, f: &Frame<M>) {
        // The other side may have closed already: that is an answer too.
        let _ = self.wr.write_all(&encode_to_bytes(f)).await;
    }
    /// The next frame that is not the replica's address book (wire 1.5
    /// sends one right after an accepted hello).
    async fn next_past_book<M: DeserializeOwned>(&mut self) -> Frame<M> {
        loop {
            match self.reader.next::<M>().await.unwrap() {
                Frame::PeerBook { .. } => continue,
                f => return f,
            }
        }
    }
    /// Frames until the other side closes (or `SLACK` passes).
    async fn until_closed<M: DeserializeOwned>(&mut self) -> Vec<Frame<M>> {
        let mut got = Vec::new();
        while let Ok(Ok(f)) = tokio::time::timeout(SLACK, self.reader.next::<M>()).await {
            got.push(f);
        }
        got
    }
}

fn hello<M>(node: NodeId, protocol: ProtocolKind) -> Frame<M> {
    Frame::HelloPeer {
        node,
        protocol,
        nonce: peer_auth::nonce().into(),
        version: Some(quorumkv_node::version::Version::ours()),
    }
}

/// A hello as replica `node` to `addr`, which must answer with its
/// challenge: the connection, our nonce, its nonce and its proof.
async fn challenged<M: Serialize + DeserializeOwned + std::fmt::Debug>(
    addr: SocketAddr,
    node: NodeId,
    protocol: ProtocolKind,
) -> (Stray, Vec<u8>, Bytes, Bytes) {
    let mut s = Stray::connect(addr).await;
    let nonce = peer_auth::nonce();
    s.send(&Frame::<M>::HelloPeer {
        node,
        protocol,
        nonce: nonce.clone().into(),
        version: Some(quorumkv_node::version::Version::ours()),
    })
    .await;
    match s.reader.next::<M>().await.unwrap() {
        Frame::PeerChallenge {
            nonce: theirs,
            proof,
        } => (s, nonce, theirs, proof),
        other => panic!("no challenge: {other:?}"),
    }
}

fn error_text<M>(frames: &[Frame<M>]) -> String {
    frames
        .iter()
        .find_map(|f| match f {
            Frame::Error { message } => Some(message.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no error frame among {} frames", frames.len()))
}

/// The six-hello quorum cut: one hello per (replica, other id) pair from a
/// stray connection, each closed at once. Before, each took over the real
/// link and its close left the peer down for good. Now each is refused
/// (the id is connected, or never dials this replica) and the links stay.
#[tokio::test]
async fn six_impostor_hellos_leave_every_link_up_without_a_secret() {
    let (replicas, addrs, file) = cluster("abd", 3, None).await;
    let mut errors = Vec::new();
    for (i, &a) in addrs.iter().enumerate() {
        for other in (1..=3).filter(|&j| j != i as NodeId + 1) {
            let mut s = Stray::connect(a).await;
            s.send(&hello::<quorumkv_core::protocol::abd::Msg>(
                other,
                file.protocol,
            ))
            .await;
            let got = s.until_closed::<quorumkv_core::protocol::abd::Msg>().await;
            errors.push(error_text(&got));
        }
    }
    assert_eq!(errors.len(), 6);
    for e in &errors {
        assert!(
            e.contains("connected already") || e.contains("never dials"),
            "{e}"
        );
    }
    still_whole_then_stop(replicas, &addrs, 10, "after-hellos").await;
}

/// With a cluster secret, a hello must be followed by a proof of it: a
/// wrong proof, no proof, or a proof for another replica id is refused and
/// the real links stay up.
#[tokio::test]
async fn with_a_secret_a_hello_without_the_proof_is_refused() {
    type M = quorumkv_core::protocol::abd::Msg;
    let (replicas, addrs, file) = cluster("abd", 3, Some(secret())).await;
    // A wrong proof.
    let mut s = Stray::connect(addrs[0]).await;
    s.send(&hello::<M>(3, file.protocol)).await;
    let challenge = s.reader.next::<M>().await.unwrap();
    assert!(
        matches!(challenge, Frame::PeerChallenge { .. }),
        "{challenge:?}"
    );
    s.send(&Frame::<M>::PeerProof {
        proof: vec![0u8; 32].into(),
    })
    .await;
    assert!(error_text(&s.until_closed::<M>().await).contains("wrong proof"));
    // No proof at all: a protocol message instead.
    let mut s = Stray::connect(addrs[0]).await;
    s.send(&hello::<M>(2, file.protocol)).await;
    s.send(&Frame::Proto(M::SyncRequest)).await;
    let got = s.until_closed::<M>().await;
    assert!(error_text(&got).contains("expected a proof"), "{got:?}");
    // The right secret, but the proof made for another id (replayed).
    let other = ClusterSecret::from_text("another secret, not the cluster's").unwrap();
    let (mut s, nonce, theirs, _) = challenged::<M>(addrs[1], 3, file.protocol).await;
    let proof = other.proof(Side::Dialler, &file.id(), (3, 2), (&theirs, &nonce));
    s.send(&Frame::<M>::PeerProof {
        proof: proof.into(),
    })
    .await;
    assert!(error_text(&s.until_closed::<M>().await).contains("wrong proof"));
    still_whole_then_stop(replicas, &addrs, 10, "after-proofs").await;
}

/// A proved replica's word about its own address moves it (wire 1.5), but
/// only its first book on a link counts: a second, saying otherwise, is
/// neither heard nor answered. A client connection's book is refused.
#[tokio::test]
async fn only_the_first_book_of_a_proved_link_is_heard() {
    type M = quorumkv_core::protocol::abd::Msg;
    let s3 = secret();
    let (replicas, addrs, file) = cluster("abd", 3, Some(s3.clone())).await;
    let (mut s, nonce, theirs, _) = challenged::<M>(addrs[0], 3, file.protocol).await;
    let cluster_id = file.id();
    let mine = s3.proof(Side::Dialler, &cluster_id, (3, 1), (&theirs, &nonce));
    s.send(&Frame::<M>::PeerProof { proof: mine.into() }).await;
    assert_eq!(s.next_past_book::<M>().await, Frame::Heartbeat);
    for port in [1, 2] {
        let addrs = vec![(3, format!("127.0.0.1:{port}"))];
        s.send(&Frame::<M>::PeerBook { addrs }).await;
    }
    let three = |hello: &quorumkv_node::client::ServerHello| {
        (hello.addrs.iter())
            .find(|(n, _)| *n == 3)
            .map(|(_, a)| a.clone())
    };
    wait_until(SLACK, "replica 1 takes replica 3's first word", || async {
        let hello = quorumkv_node::client::probe(addrs[0], SLACK).await.unwrap();
        three(&hello).as_deref() == Some("127.0.0.1:1")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(5 * BEAT_MS)).await;
    let hello = quorumkv_node::client::probe(addrs[0], SLACK).await.unwrap();
    assert_eq!(
        three(&hello).as_deref(),
        Some("127.0.0.1:1"),
        "the second book"
    );
    drop(s);
    // A client's hello, then a book: refused, the connection closed.
    let mut c = Stray::connect(addrs[1]).await;
    c.send(&Frame::<M>::hello_client()).await;
    let addrs3 = vec![(1, "127.0.0.1:3".to_string())];
    c.send(&Frame::<M>::PeerBook { addrs: addrs3 }).await;
    let got = c.until_closed::<M>().await;
    assert!(error_text(&got).contains("PeerBook"), "{got:?}");
    for r in replicas {
        r.shut_down().await;
    }
}

/// A redial that overlaps a live link (a half-open old connection, no
/// attacker): with the secret proven, the new link replaces the old one;
/// when it closes, the real replica's link comes back (it is never left
/// down while the replica is alive).
#[tokio::test]
async fn an_authenticated_redial_replaces_a_live_link_and_the_peer_comes_back() {
    type M = quorumkv_core::protocol::abd::Msg;
    let s3 = secret();
    let (replicas, addrs, file) = cluster("abd", 3, Some(s3.clone())).await;
    let (mut s, nonce, theirs, proof) = challenged::<M>(addrs[0], 3, file.protocol).await;
    let cluster_id = file.id();
    assert!(
        s3.verify(
            Side::Acceptor,
            &cluster_id,
            (1, 3),
            (&nonce, &theirs),
            &proof
        ),
        "the acceptor proves the secret too"
    );
    let mine = s3.proof(Side::Dialler, &cluster_id, (3, 1), (&theirs, &nonce));
    s.send(&Frame::<M>::PeerProof { proof: mine.into() }).await;
    // Accepted: the link beats.
    assert_eq!(s.next_past_book::<M>().await, Frame::Heartbeat);
    drop(s);
    all_links_up(&addrs).await;
    writes_and_reads_work(&addrs, "after-redial", "v").await;
    for r in replicas {
        r.shut_down().await;
    }
}

/// A replica with a secret does not link with one that cannot prove it
/// (nor the other way round): a replica configured without the secret
/// stays out, and says why.
#[tokio::test]
async fn replicas_without_the_secret_never_link_with_ones_that_have_it() {
    let (file, mut ls) = listeners(2).await;
    let mut one = fast_opts(1, &file, BEAT_MS);
    one.secret = Some(secret());
    let two = fast_opts(2, &file, BEAT_MS); // no secret
    let two = Replica::start(two, ls.pop().unwrap());
    let one = Replica::start(one, ls.pop().unwrap());
    let (a1, a2) = (one.addr, two.addr);
    tokio::time::sleep(Duration::from_millis(10 * BEAT_MS)).await;
    assert!(peers_up(a1).await.is_empty());
    assert!(peers_up(a2).await.is_empty());
    one.shut_down().await;
    two.shut_down().await;
}

/// Zab's replica messages from a client connection (after a client hello,
/// or with no hello at all) are refused: before, each impersonation knocked
/// a replica out of the quorum.
#[tokio::test]
async fn zab_messages_from_a_client_connection_are_refused() {
    use quorumkv_core::protocol::zab::Msg as Z;
    let (replicas, addrs, _) = cluster("zab", 3, None).await;
    writes_and_reads_work(&addrs, "before", "v").await;
    let forged = [
        Z::Commit {
            epoch: u64::MAX,
            index: u64::MAX,
        },
        Z::NewEpoch { epoch: u64::MAX },
        Z::Beat { epoch: u64::MAX },
    ];
    for (i, msg) in forged.into_iter().enumerate() {
        for &a in &addrs {
            let mut s = Stray::connect(a).await;
            if i % 2 == 0 {
                s.send(&Frame::<Z>::hello_client()).await;
            }
            s.send(&Frame::Proto(msg.clone())).await;
            let got = s.until_closed::<Z>().await;
            assert!(
                error_text(&got).contains("may only come from a replica"),
                "{got:?}"
            );
        }
    }
    still_whole_then_stop(replicas, &addrs, 5, "after").await;
}

/// ABD: a client-side coordinator may send queries and stores, never a
/// `SyncRequest` (which would hand it the whole store) nor a replica's
/// replies.
#[tokio::test]
async fn abd_peer_only_messages_from_a_client_connection_are_refused() {
    use quorumkv_core::protocol::abd::Msg as A;
    let (replicas, addrs, _) = cluster("abd", 3, None).await;
    writes_and_reads_work(&addrs, "secret-key", "v").await;
    for msg in [A::SyncRequest, A::StoreAck { op: 1 }] {
        let mut s = Stray::connect(addrs[0]).await;
        s.send(&Frame::Proto(msg)).await;
        let got = s.until_closed::<A>().await;
        assert!(
            got.iter()
                .all(|f| !matches!(f, Frame::Proto(A::SyncReply { .. }))),
            "the store leaked"
        );
        assert!(error_text(&got).contains("may only come from a replica"));
    }
    // A coordinator's query is still served.
    let mut s = Stray::connect(addrs[0]).await;
    let q = A::Query {
        op: 1,
        key: "secret-key".into(),
        epoch: 0,
    };
    s.send(&Frame::Proto(q)).await;
    let got = s.reader.next::<A>().await.unwrap();
    assert!(
        matches!(got, Frame::Proto(A::QueryReply { op: 1, .. })),
        "{got:?}"
    );
    for r in replicas {
        r.shut_down().await;
    }
}

/// The forged maximum tag: one `Store` of `(2^64-1, 999)` from a stray
/// connection used to freeze the key (the next tag wrapped to 0, so later
/// writes were acknowledged and lost). Now the key stays writable.
#[tokio::test]
async fn a_forged_maximum_tag_does_not_freeze_a_key() {
    use quorumkv_core::protocol::abd::Msg as A;
    let (replicas, addrs, _) = cluster("abd", 3, None).await;
    writes_and_reads_work(&addrs, "victim", "v1").await;
    for &a in &addrs {
        for tag in [
            Tag {
                ts: u64::MAX,
                writer: 999,
            },
            Tag {
                ts: u64::MAX - 1,
                writer: u64::MAX,
            },
        ] {
            let mut s = Stray::connect(a).await;
            s.send(&Frame::Proto(A::Store {
                op: 7,
                key: "victim".into(),
                tag,
                value: Some("forged".into()),
                epoch: 0,
            }))
            .await;
            // Whatever it answers, it must not hold the forged value.
            let _ = tokio::time::timeout(Duration::from_millis(200), s.reader.next::<A>()).await;
        }
    }
    writes_and_reads_work(&addrs, "victim", "v2").await;
    // Direct mode too: the client's own coordinator reads and writes.
    let c = client(&addrs, ClientMode::Direct).await;
    c.put("victim", "v3").await.unwrap();
    assert_eq!(c.get("victim").await.unwrap(), Some(Bytes::from("v3")));
    for r in replicas {
        r.shut_down().await;
    }
}

/// A replica with users: a client must log in before anything but a
/// status request, a wrong password is refused, and each role does what
/// it may and nothing more (ABD, proxy and direct mode).
#[tokio::test]
async fn native_clients_log_in_and_keep_to_their_role() {
    use quorumkv_node::auth::{hash_password, Role, Users, UsersHandle};
    use quorumkv_node::client::{ClientError, Credentials};
    let mut users = Users::default();
    users
        .set(
            "alice",
            Role::ReadWrite,
            hash_password("wonderland").unwrap(),
        )
        .unwrap();
    users
        .set("bob", Role::Read, hash_password("builder").unwrap())
        .unwrap();
    let users = UsersHandle::from_users(users);
    let (file, ls) = listeners(3).await;
    let mut replicas = Vec::new();
    for (i, l) in ls.into_iter().enumerate() {
        let mut opts = fast_opts(i as NodeId + 1, &file, BEAT_MS);
        opts.users = Some(users.clone());
        replicas.push(Replica::start(opts, l));
    }
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    all_links_up(&addrs).await; // status requests need no login
    let login = |user: &str, password: &str, mode| {
        let credentials = Some(Credentials {
            user: user.into(),
            password: password.into(),
        });
        let cfg = ClientConfig {
            mode,
            credentials,
            ..ClientConfig::default()
        };
        Client::connect(addrs.clone(), cfg)
    };
    // No login, a wrong password, an unknown user: refused, saying why.
    let none = Client::connect(addrs.clone(), ClientConfig::default()).await;
    let why = none.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(why.contains("NOAUTH"), "{why}");
    for (u, p) in [("alice", "looking-glass"), ("mallory", "wonderland")] {
        let wrong = login(u, p, ClientMode::Proxy).await;
        let why = wrong.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(why.contains("WRONGPASS"), "{why}");
    }
    // readwrite: writes and reads, in both modes.
    for mode in [ClientMode::Proxy, ClientMode::Direct] {
        let alice = login("alice", "wonderland", mode).await.unwrap();
        alice.put("k", "v1").await.unwrap();
        assert_eq!(alice.get("k").await.unwrap(), Some(Bytes::from("v1")));
    }
    // read: reads through a server; a write is refused (definitely).
    let bob = login("bob", "builder", ClientMode::Proxy).await.unwrap();
    assert_eq!(bob.get("k").await.unwrap(), Some(Bytes::from("v1")));
    let put = bob.put("k", "bob's").await;
    assert!(
        matches!(&put, Err(ClientError::Op(e)) if e.to_string().contains("NOPERM") && e.is_definite()),
        "{put:?}"
    );
    // A raw client-side coordinator of a read user is cut off.
    {
        use quorumkv_core::protocol::abd::Msg as A;
        let mut s = Stray::connect(addrs[0]).await;
        s.send(&Frame::<A>::Auth {
            user: "bob".into(),
            password: "builder".into(),
        })
        .await;
        s.send(&Frame::Proto(A::Query {
            op: 1,
            key: "k".into(),
            epoch: 0,
        }))
        .await;
        assert!(error_text(&s.until_closed::<A>().await).contains("NOPERM"));
    }
    let alice = login("alice", "wonderland", ClientMode::Proxy)
        .await
        .unwrap();
    assert_eq!(alice.get("k").await.unwrap(), Some(Bytes::from("v1")));
    for r in replicas {
        r.shut_down().await;
    }
}

/// The same race without an attacker: a replica redials while its old
/// connection still looks alive (no secret, so the new hello cannot prove
/// it is the same replica). The new hello is refused while the old link
/// beats, its close leaves the peer up, and once the old link goes silent
/// and is declared down, the redial is taken.
#[tokio::test]
async fn a_redial_overlapping_a_live_link_waits_for_the_old_one_to_die() {
    type M = quorumkv_core::protocol::abd::Msg;
    let (file, mut ls) = listeners(2).await;
    drop(ls.pop()); // replica 2 is played by this test
    let one = Replica::start(fast_opts(1, &file, BEAT_MS), ls.pop().unwrap());
    let a1 = one.addr;
    // The first connection: accepted; it beats from a task of its own.
    let mut old = Stray::connect(a1).await;
    old.send(&hello::<M>(2, file.protocol)).await;
    assert_eq!(old.next_past_book::<M>().await, Frame::Heartbeat);
    let beats = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(BEAT_MS));
        for _ in 0..20 {
            tick.tick().await;
            old.send(&Frame::<M>::Heartbeat).await;
        }
        old // kept open, silent: half-open from now on
    });
    wait_until(SLACK, "replica 1 has its link to 2", || async {
        peers_up(a1).await == [2]
    })
    .await;
    // The redial while the old link beats: refused, and its close leaves
    // the peer up.
    let mut new = Stray::connect(a1).await;
    new.send(&hello::<M>(2, file.protocol)).await;
    let got = new.until_closed::<M>().await;
    assert!(error_text(&got).contains("connected already"), "{got:?}");
    for _ in 0..10 {
        assert_eq!(
            peers_up(a1).await,
            [2],
            "a refused hello's close took the link down"
        );
        tokio::time::sleep(Duration::from_millis(BEAT_MS / 2)).await;
    }
    // The old connection goes silent (still open): declared down by the
    // heartbeat timeout, after which a redial is taken.
    let _silent = beats.await.unwrap();
    wait_until(SLACK, "the silent old link is declared down", || async {
        peers_up(a1).await.is_empty()
    })
    .await;
    let mut again = Stray::connect(a1).await;
    again.send(&hello::<M>(2, file.protocol)).await;
    assert_eq!(again.next_past_book::<M>().await, Frame::Heartbeat);
    wait_until(SLACK, "the redial is replica 1's link to 2", || async {
        peers_up(a1).await == [2]
    })
    .await;
    one.shut_down().await;
}
