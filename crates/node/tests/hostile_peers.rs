//! Hostile handshakes against a cluster with authentication on (issue 31,
//! item 6): the handshake and peer-frame decoders fuzzed end to end, on
//! live replicas rather than on a bare decoder.
//!
//! Three in-process ABD replicas with a cluster secret and a users file.
//! Many stray connections, each drawn from a seeded RNG, send random and
//! mutated handshake sequences: `HelloPeer` with real and forged ids,
//! protocols and nonces; `PeerChallenge` / `PeerProof` with random bytes
//! (or the acceptor's own proof reflected); `Auth` with random users and
//! passwords; truncated and oversized frames; random bytes after a valid
//! hello; valid frames in the wrong order; valid sequences with bytes
//! flipped, inserted or removed. Each connection then half-closes and must
//! be closed by the replica (none may hang).
//!
//! Afterwards every replica still has all its links (and had them all
//! along), the data written before is intact, a logged-in client writes
//! and reads, and the refusal counters (INFO's `handshakes_refused`,
//! `frames_refused`, and the failed logins) moved by at least the number
//! of connections that had to be refused.
//!
//! A failure prints its seed; replay it with
//! `QUORUMKV_HOSTILE_SEED=N cargo test -p quorumkv-node --test hostile_peers`.
//! `QUORUMKV_HOSTILE_CONNS` sets the number of connections (default 400:
//! a few seconds in a debug build).

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use common::{listeners, peers_up, wait_until, Replica};
use quorumkv_core::protocol::abd::Msg;
use quorumkv_core::protocol::ProtocolKind;
use quorumkv_core::{NodeId, Tag};
use quorumkv_node::auth::{hash_password, Credentials, Role, Users, UsersHandle, AUTH_FAILURES};
use quorumkv_node::client::{Client, ClientConfig, ClientMode};
use quorumkv_node::codec::{encode_to_bytes, Frame, DEFAULT_MAX_FRAME};
use quorumkv_node::guard::{FRAMES_REFUSED, HANDSHAKES_REFUSED};
use quorumkv_node::net::FrameReader;
use quorumkv_node::peer_auth::ClusterSecret;
use quorumkv_node::server::ServerOptions;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const USER: &str = "alice";
const PASSWORD: &str = "wonderland";
/// Connections at once.
const PARALLEL: usize = 16;
/// Most `Auth` frames with a wrong password in a run: each costs an
/// argon2 check (about 20 ms, one at a time on 2 cores).
const WRONG_LOGINS: u64 = 40;
/// Longest a replica may take to close a connection after its EOF (a
/// hello without a proof waits for one up to 5 s).
const CLOSE_WITHIN: Duration = Duration::from_secs(15);

fn seed() -> u64 {
    std::env::var("QUORUMKV_HOSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(31)
}

fn conns() -> usize {
    std::env::var("QUORUMKV_HOSTILE_CONNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400)
}

fn frame(f: &Frame<Msg>) -> Vec<u8> {
    encode_to_bytes(f).to_vec()
}

fn random_bytes(rng: &mut StdRng, max: usize) -> Vec<u8> {
    let mut v = vec![0u8; rng.random_range(0..=max)];
    rng.fill_bytes(&mut v);
    v
}

fn random_text(rng: &mut StdRng, max: usize) -> String {
    let n = rng.random_range(0..=max);
    (0..n)
        .map(|_| match rng.random_range(0..4) {
            0 => char::from(rng.random_range(0u8..128)),
            1 => char::from_u32(rng.random_range(0x80..0x3000)).unwrap_or('?'),
            _ => char::from(rng.random_range(b'a'..=b'z')),
        })
        .collect()
}

/// A replica id: a member (1..=3), 0, just past the cluster, or anything.
fn node_id(rng: &mut StdRng) -> NodeId {
    match rng.random_range(0..6) {
        0 => 0,
        1 => 4,
        2 => rng.random(),
        _ => rng.random_range(1..=3),
    }
}

fn protocol(rng: &mut StdRng) -> ProtocolKind {
    let all = ProtocolKind::all();
    if rng.random_bool(0.7) {
        "abd".parse().unwrap()
    } else {
        all[rng.random_range(0..all.len())]
    }
}

fn hello(rng: &mut StdRng, node: NodeId) -> Frame<Msg> {
    let nonce = match rng.random_range(0..4) {
        0 => Vec::new(),
        1 => random_bytes(rng, 200),
        _ => {
            let mut n = vec![0u8; 32];
            rng.fill_bytes(&mut n);
            n
        }
    };
    Frame::HelloPeer {
        node,
        protocol: protocol(rng),
        nonce: nonce.into(),
        version: Some(quorumkv_node::version::Version::ours()),
    }
}

/// Any frame a stray might send, valid on its own, most of them out of
/// place on a fresh connection.
fn any_frame(rng: &mut StdRng) -> Frame<Msg> {
    match rng.random_range(0..12) {
        0 => {
            let n = node_id(rng);
            hello(rng, n)
        }
        1 => Frame::hello_client(),
        2 => Frame::PeerChallenge {
            nonce: random_bytes(rng, 64).into(),
            proof: random_bytes(rng, 64).into(),
        },
        3 => Frame::PeerProof {
            proof: random_bytes(rng, 64).into(),
        },
        4 => Frame::Heartbeat,
        5 => Frame::StatusRequest,
        6 => Frame::Error {
            message: random_text(rng, 40),
        },
        7 => Frame::Welcome {
            node: node_id(rng),
            protocol: protocol(rng),
            members: vec![1, 2, 3],
            options: Vec::new(),
            addrs: Vec::new(),
            role: Some("admin".into()),
            version: None,
        },
        8 => Frame::Proto(Msg::Query {
            op: rng.random(),
            key: Bytes::from(format!("k{}", rng.random_range(0..40))),
            epoch: rng.random_range(0..3),
        }),
        9 => Frame::Proto(Msg::Store {
            op: rng.random(),
            key: Bytes::from(format!("k{}", rng.random_range(0..40))),
            // The forged maximum tag of issue 31, among others.
            tag: Tag {
                ts: if rng.random_bool(0.5) {
                    u64::MAX
                } else {
                    rng.random()
                },
                writer: rng.random(),
            },
            value: Some(Bytes::from_static(b"forged")),
            epoch: rng.random_range(0..3),
        }),
        10 => Frame::Proto(Msg::StoreAck { op: rng.random() }),
        _ => Frame::Proto(Msg::SyncRequest),
    }
}

/// Flip, insert or remove a few bytes.
fn mutate(rng: &mut StdRng, mut bytes: Vec<u8>) -> Vec<u8> {
    for _ in 0..rng.random_range(1..=4) {
        match rng.random_range(0..3) {
            0 if !bytes.is_empty() => {
                let i = rng.random_range(0..bytes.len());
                bytes[i] ^= 1 << rng.random_range(0..8);
            }
            1 => {
                let i = rng.random_range(0..=bytes.len());
                bytes.insert(i, rng.random());
            }
            _ if !bytes.is_empty() => {
                let i = rng.random_range(0..bytes.len());
                bytes.remove(i);
            }
            _ => {}
        }
    }
    bytes
}

/// What a replica must do with a connection, as far as the counters go.
#[derive(Default, Clone, Copy)]
struct Owed {
    handshakes: u64,
    frames: u64,
    logins: u64,
}

/// One stray connection's script: bytes to send, in writes.
struct Script {
    writes: Vec<Vec<u8>>,
    /// The first frame is a `HelloPeer` for a replica the target would
    /// take a link from (a member above it, running abd): read its
    /// challenge and answer it with `answer` (the challenge's own proof
    /// when `None`).
    challenge: Option<Option<Vec<u8>>>,
    owed: Owed,
}

/// Draw connection `i`'s script against replica `target`.
fn script(rng: &mut StdRng, target: NodeId, wrong_logins: &AtomicU64) -> Script {
    let mut s = Script {
        writes: Vec::new(),
        challenge: None,
        owed: Owed::default(),
    };
    let abd: ProtocolKind = "abd".parse().unwrap();
    match rng.random_range(0..11) {
        // A hello with any id, protocol and nonce, then maybe more frames.
        0 | 1 => {
            let node = node_id(rng);
            let h = hello(rng, node);
            let acceptable = matches!(&h, Frame::HelloPeer { node, protocol, .. }
                if *protocol == abd && *node > target && *node <= 3);
            s.writes.push(frame(&h));
            s.owed.handshakes = 1;
            if acceptable {
                // The acceptor challenges; answer with junk, the reflected
                // proof, or nothing at all (EOF).
                s.challenge = Some(match rng.random_range(0..3) {
                    0 => None,
                    1 => Some(frame(&Frame::PeerProof {
                        proof: random_bytes(rng, 64).into(),
                    })),
                    _ => Some(frame(&any_frame(rng))),
                });
            } else {
                for _ in 0..rng.random_range(0..3) {
                    let f = any_frame(rng);
                    s.writes.push(frame(&f));
                }
            }
        }
        // Peer-handshake frames first, with random bytes.
        2 => {
            let f = if rng.random_bool(0.5) {
                Frame::PeerProof {
                    proof: random_bytes(rng, 100).into(),
                }
            } else {
                Frame::PeerChallenge {
                    nonce: random_bytes(rng, 100).into(),
                    proof: random_bytes(rng, 100).into(),
                }
            };
            s.writes.push(frame(&f));
            // Without a login, refused as a frame (NOAUTH) before its
            // place in the handshake is looked at.
            s.owed.frames = 1;
        }
        // A login with random (or nearly right) credentials, then frames.
        3 => {
            if wrong_logins.fetch_add(1, Ordering::Relaxed) < WRONG_LOGINS {
                let user = match rng.random_range(0..3) {
                    0 => USER.to_string(),
                    1 => random_text(rng, 80),
                    _ => "default".into(),
                };
                let password = match rng.random_range(0..3) {
                    0 => format!("{PASSWORD}{}", rng.random_range(0..10)),
                    1 => String::new(),
                    _ => random_text(rng, 300),
                };
                s.writes.push(frame(&Frame::Auth { user, password }));
                s.owed.logins = 1;
            } else {
                s.writes.push(frame(&Frame::hello_client()));
                s.owed.frames = 1;
            }
            for _ in 0..rng.random_range(0..3) {
                let f = any_frame(rng);
                s.writes.push(frame(&f));
            }
        }
        // A valid frame cut short.
        4 => {
            let f = frame(&any_frame(rng));
            let cut = rng.random_range(0..f.len());
            s.writes.push(f[..cut].to_vec());
        }
        // A length prefix past the limit, or a huge one, then some bytes.
        5 => {
            let mut b = BytesMut::new();
            let len = match rng.random_range(0..3) {
                0 => DEFAULT_MAX_FRAME as u32 + 1,
                1 => u32::MAX,
                _ => rng.random_range(DEFAULT_MAX_FRAME as u32 + 1..=u32::MAX),
            };
            b.put_u32(len);
            b.extend_from_slice(&random_bytes(rng, 300));
            s.writes.push(b.to_vec());
        }
        // Random bytes after a valid hello (a peer's or a client's).
        6 => {
            let first = if rng.random_bool(0.5) {
                let n = node_id(rng);
                s.owed.handshakes = 1;
                hello(rng, n)
            } else {
                s.owed.frames = 1; // NOAUTH
                Frame::hello_client()
            };
            s.writes.push(frame(&first));
            s.writes.push(random_bytes(rng, 400));
        }
        // Valid frames in the wrong order.
        7 => {
            for _ in 0..rng.random_range(2..6) {
                let f = any_frame(rng);
                s.writes.push(frame(&f));
            }
        }
        // A valid handshake sequence with bytes flipped, inserted, removed.
        8 => {
            let mut seq = Vec::new();
            seq.extend(frame(&hello(rng, target + 1)));
            seq.extend(frame(&Frame::PeerProof {
                proof: random_bytes(rng, 32).into(),
            }));
            if rng.random_bool(0.5) {
                seq = frame(&Frame::Auth {
                    user: USER.into(),
                    password: PASSWORD.into(),
                });
                seq.extend(frame(&Frame::hello_client()));
            }
            s.writes.push(mutate(rng, seq));
        }
        // Logged in as a real user, then a peer's handshake: a client may
        // never become a replica link.
        9 if wrong_logins.load(Ordering::Relaxed) < 2 * WRONG_LOGINS => {
            wrong_logins.fetch_add(1, Ordering::Relaxed); // a login costs the same
            s.writes.push(frame(&Frame::Auth {
                user: USER.into(),
                password: PASSWORD.into(),
            }));
            let node = rng.random_range(1..=3);
            let h = hello(rng, node);
            s.writes.push(frame(&h));
            s.owed.handshakes = 1;
        }
        // Bytes, or length-prefixed random bodies that reach the decoder.
        _ => {
            if rng.random_bool(0.5) {
                s.writes.push(random_bytes(rng, 300));
            } else {
                let mut b = BytesMut::new();
                for _ in 0..rng.random_range(1..4) {
                    let body = random_bytes(rng, 60);
                    b.put_u32(body.len() as u32);
                    b.extend_from_slice(&body);
                }
                s.writes.push(b.to_vec());
            }
        }
    }
    // Split the writes at random points, as a slow sender would.
    if rng.random_bool(0.3) {
        let all: Vec<u8> = s.writes.concat();
        let mut pieces = Vec::new();
        let mut rest = &all[..];
        while !rest.is_empty() {
            let n = rng.random_range(1..=rest.len().min(16));
            pieces.push(rest[..n].to_vec());
            rest = &rest[n..];
        }
        s.writes = pieces;
    }
    s
}

/// Run one script against `addr`; then half-close and wait for the replica
/// to close. Err: it kept the connection open.
async fn play(addr: SocketAddr, s: Script) -> Result<(), String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let (rd, mut wr) = quorumkv_node::stream::Conn::from(stream).split();
    let mut reader = FrameReader::new(rd, DEFAULT_MAX_FRAME);
    for w in &s.writes {
        // The replica may have closed already: that is an answer too.
        if wr.write_all(w).await.is_err() || wr.flush().await.is_err() {
            break;
        }
    }
    if let Some(answer) = s.challenge {
        let first = tokio::time::timeout(CLOSE_WITHIN, reader.next::<Msg>()).await;
        let reflected = match first {
            Ok(Ok(Frame::PeerChallenge { proof, .. })) => frame(&Frame::PeerProof { proof }),
            other => return Err(format!("no challenge to a member's hello: {other:?}")),
        };
        let _ = wr.write_all(&answer.unwrap_or(reflected)).await;
    }
    let _ = wr.shutdown().await;
    let closed = async {
        // Frames until the replica closes (or the bytes stop decoding).
        while reader.next::<Msg>().await.is_ok() {}
    };
    tokio::time::timeout(CLOSE_WITHIN, closed)
        .await
        .map_err(|_| format!("{addr} kept a stray connection open after its EOF"))
}

async fn all_links(addrs: &[SocketAddr]) -> bool {
    let n = addrs.len() as NodeId;
    for (i, &a) in addrs.iter().enumerate() {
        let me = i as NodeId + 1;
        let want: Vec<NodeId> = (1..=n).filter(|&j| j != me).collect();
        if peers_up(a).await != want {
            return false;
        }
    }
    true
}

async fn login(addrs: &[SocketAddr], mode: ClientMode) -> Client {
    let cfg = ClientConfig {
        mode,
        credentials: Some(Credentials {
            user: USER.into(),
            password: PASSWORD.into(),
        }),
        ..ClientConfig::default()
    };
    Client::connect(addrs.iter().copied(), cfg).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_handshakes_leave_links_data_and_logins_intact() {
    let seed = seed();
    let n_conns = conns();
    eprintln!(
        "hostile_peers: seed {seed}, {n_conns} connections (QUORUMKV_HOSTILE_SEED to replay)"
    );
    let started = std::time::Instant::now();

    let mut users = Users::default();
    users
        .set(USER, Role::ReadWrite, hash_password(PASSWORD).unwrap())
        .unwrap();
    let users = UsersHandle::from_users(users);
    let secret = ClusterSecret::from_text(&ClusterSecret::generate()).unwrap();
    let (file, ls) = listeners(3).await;
    let mut replicas = Vec::new();
    for (i, l) in ls.into_iter().enumerate() {
        let mut opts = ServerOptions::new(i as NodeId + 1, file.clone());
        opts.secret = Some(secret.clone());
        opts.users = Some(users.clone());
        replicas.push(Replica::start(opts, l));
    }
    let addrs: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
    wait_until(Duration::from_secs(20), "every link up", || {
        all_links(&addrs)
    })
    .await;

    // Data before.
    let alice = login(&addrs, ClientMode::Proxy).await;
    for k in 0..40 {
        alice.put(format!("k{k}"), format!("v{k}")).await.unwrap();
    }

    let before = (
        HANDSHAKES_REFUSED.load(Ordering::Relaxed),
        FRAMES_REFUSED.load(Ordering::Relaxed),
        AUTH_FAILURES.load(Ordering::Relaxed),
    );

    // Links are watched all along.
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (done, addrs) = (done.clone(), addrs.clone());
        tokio::spawn(async move {
            let mut lost = Vec::new();
            while !done.load(Ordering::Relaxed) {
                for (i, &a) in addrs.iter().enumerate() {
                    // A status answer that is slow on a loaded machine is
                    // not a lost link: only answers count.
                    let Ok(s) = quorumkv_node::status::fetch(a, Duration::from_secs(5)).await
                    else {
                        continue;
                    };
                    let up = s.peers_up;
                    if up.len() != addrs.len() - 1 {
                        lost.push(format!("replica {} had links to {up:?}", i + 1));
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            lost
        })
    };

    let wrong_logins = Arc::new(AtomicU64::new(0));
    let mut owed = Owed::default();
    let mut tasks = tokio::task::JoinSet::new();
    let mut failures = Vec::new();
    for i in 0..n_conns {
        // Each connection's script depends on the seed and its number only.
        let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(i as u64));
        let target = rng.random_range(1..=3u32);
        let s = script(&mut rng, target, &wrong_logins);
        owed.handshakes += s.owed.handshakes;
        owed.frames += s.owed.frames;
        owed.logins += s.owed.logins;
        let addr = addrs[target as usize - 1];
        tasks.spawn(async move {
            play(addr, s)
                .await
                .map_err(|e| format!("connection {i}: {e}"))
        });
        while tasks.len() >= PARALLEL {
            if let Some(r) = tasks.join_next().await {
                if let Err(e) = r.expect("a stray connection's task panicked") {
                    failures.push(e);
                }
            }
        }
    }
    while let Some(r) = tasks.join_next().await {
        if let Err(e) = r.expect("a stray connection's task panicked") {
            failures.push(e);
        }
    }
    let hostile = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let lost = watcher.await.unwrap();
    assert!(failures.is_empty(), "seed {seed}: {failures:#?}");
    assert!(
        lost.is_empty(),
        "seed {seed}: links lost while under attack: {lost:#?}"
    );
    assert!(
        all_links(&addrs).await,
        "seed {seed}: a link is down afterwards"
    );

    // The counters moved by at least what had to be refused.
    let after = (
        HANDSHAKES_REFUSED.load(Ordering::Relaxed),
        FRAMES_REFUSED.load(Ordering::Relaxed),
        AUTH_FAILURES.load(Ordering::Relaxed),
    );
    let moved = (after.0 - before.0, after.1 - before.1, after.2 - before.2);
    eprintln!(
        "hostile_peers: {n_conns} connections in {hostile:?}; refused handshakes {} (owed {}), \
         frames {} (owed {}), failed logins {} (owed {})",
        moved.0, owed.handshakes, moved.1, owed.frames, moved.2, owed.logins
    );
    assert!(
        moved.0 >= owed.handshakes && owed.handshakes > 0,
        "seed {seed}: handshakes refused {} < {}",
        moved.0,
        owed.handshakes
    );
    assert!(
        moved.1 >= owed.frames && owed.frames > 0,
        "seed {seed}: frames refused {} < {}",
        moved.1,
        owed.frames
    );
    assert!(
        moved.2 >= owed.logins && owed.logins > 0,
        "seed {seed}: failed logins {} < {}",
        moved.2,
        owed.logins
    );

    // The data written before is intact, at every replica; a logged-in
    // client writes and reads, in both modes.
    for &a in &addrs {
        let one = login(&[a], ClientMode::Proxy).await;
        for k in 0..40 {
            let got = one.get(format!("k{k}")).await.unwrap();
            assert_eq!(
                got,
                Some(Bytes::from(format!("v{k}"))),
                "seed {seed}: k{k} at {a}"
            );
        }
    }
    for mode in [ClientMode::Proxy, ClientMode::Direct] {
        let c = login(&addrs, mode).await;
        c.put("after", format!("{mode:?}")).await.unwrap();
        assert_eq!(
            c.get("after").await.unwrap(),
            Some(Bytes::from(format!("{mode:?}")))
        );
    }
    for r in replicas {
        r.shut_down().await;
    }
    eprintln!("hostile_peers: done in {:?}", started.elapsed());
}
